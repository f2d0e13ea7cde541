package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/pdrouter/pdrouter/internal/textcut"
)

// decodeBody reads a JSON body strictly: one object, no unknown fields, at
// most limit bytes. Every failure is a precise *Error: 413 for size, 415 for
// another content type, 408 when the body stops arriving, 400 for malformed
// JSON, with the JSON path of the field at fault when known. It returns the
// raw body, which HTTP ingest keeps as the record's raw payload.
func decodeBody(c *gin.Context, limit int64, dst any) ([]byte, error) {
	raw, err := readBody(c, limit, nil)
	if err != nil {
		return nil, err
	}
	if err := decodeJSON(raw, defaultMaxMapMembers, dst); err != nil {
		return nil, err
	}
	return raw, nil
}

// defaultMaxMapMembers bounds the members of map-typed objects of the
// bodies that have no limit of their own (none has maps today).
const defaultMaxMapMembers = 1024

// minBodyBuf is the first buffer of a body read without one.
const minBodyBuf = 4 << 10

// readBody checks the content type and reads the body, at most limit
// bytes, into buf (reused when large enough; nil allocates).
//
// The buffer grows with what arrives, never with what the request
// declares: a Content-Length is a claim, and a thousand requests claiming
// 16 MiB and sending nothing must not hold 16 GiB. A body over the limit is
// read on and discarded (tooLong) before the 413, so the client (still
// sending) reads the answer instead of a reset. The read
// deadline the limits middleware set when the request arrived bounds the
// whole read; it is lifted once the body is in, so a long handler is not
// cut off by it.
func readBody(c *gin.Context, limit int64, buf []byte) ([]byte, error) {
	if ct := c.ContentType(); ct != "" && ct != "application/json" {
		return nil, &Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
			Message: fmt.Sprintf("Content-Type is %s; send application/json", quoted(ct))}
	}
	body := c.Request.Body
	if n := c.Request.ContentLength; n > limit {
		return nil, tooLong(c, body, 0, n, limit)
	}
	r := io.LimitReader(body, limit+1)
	buf = buf[:0]
	if buf == nil {
		buf = make([]byte, 0, minBodyBuf)
	}
	for {
		if len(buf) == cap(buf) {
			// Double what arrived, up to the limit (and one byte for EOF).
			grow := min(max(cap(buf), minBodyBuf), int(limit+1)-len(buf))
			buf = slices.Grow(buf, grow)
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case int64(len(buf)) > limit:
			return nil, tooLong(c, body, int64(len(buf)), c.Request.ContentLength, limit)
		case errors.Is(err, io.EOF):
			liftReadDeadline(c)
			return buf, nil
		case err != nil:
			return nil, readError(err)
		}
	}
}

// tooLong answers a body over limit, of which read bytes were read and
// declared were announced (-1: unknown). It first discards the rest of the
// body while the whole stays within twice the limit, so a client that
// writes its whole body before reading sees the 413, not a reset. A body
// declared larger than that is not read at all: the server then closes the
// connection after the answer. Neither is one whose client waits for
// "100 Continue" before sending it: the 413 reaches it first.
func tooLong(c *gin.Context, body io.Reader, read, declared, limit int64) error {
	waiting := read == 0 && strings.EqualFold(c.GetHeader("Expect"), "100-continue")
	if declared <= 2*limit && !waiting {
		if _, err := io.CopyN(io.Discard, body, 2*limit-read); errors.Is(err, io.EOF) {
			liftReadDeadline(c)
		}
	}
	return tooLarge("body_too_large", "", fmt.Sprintf("the body is larger than %d bytes", limit))
}

// readError is the answer to a body that could not be read.
func readError(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &Error{Status: http.StatusRequestTimeout, Code: codeRequestTimeout,
			Message: "the body did not arrive within the read timeout; send it at once"}
	}
	return badRequest("malformed_json", "", "the body could not be read: "+textcut.Truncate(err.Error(), maxQuotedBytes))
}

// decodeJSON decodes raw into dst strictly (decodeBody): exact and unique
// keys (checkKeys), and at most maxMapMembers members in the objects
// decoded into maps.
func decodeJSON(raw []byte, maxMapMembers int, dst any) error {
	if !json.Valid(raw) {
		// encoding/json says precisely what is wrong.
		if err := decodeStd(raw, dst); err != nil {
			return err
		}
		return badRequest("malformed_json", "", "the body is not valid JSON")
	}
	if err := checkKeys(raw, reflect.TypeOf(dst), maxMapMembers); err != nil {
		return err
	}
	return decodeStd(raw, dst)
}

// decodeStd decodes raw into dst with encoding/json: one value, no
// unknown fields.
func decodeStd(raw []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("malformed_json", "", "the body holds more than one JSON value; send exactly one object")
	}
	return nil
}

// jsonError is the answer to an encoding/json error.
func jsonError(err error) error {
	var (
		se  *json.SyntaxError
		ute *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return badRequest("malformed_json", "", "the body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed_json", "", "the body ends in the middle of a JSON value")
	case errors.As(err, &se):
		return badRequest("malformed_json", "", fmt.Sprintf("invalid JSON at byte %d: %s", se.Offset, textcut.Truncate(se.Error(), maxQuotedBytes)))
	case errors.As(err, &ute):
		field := textcut.Truncate(ute.Field, maxFieldBytes)
		// Value quotes a number's literal whole ("number 6666…"), as long as
		// the body sent it.
		return badRequest("invalid_type", field, fmt.Sprintf("%s: got a JSON %s, want %s", orBody(field), textcut.Truncate(ute.Value, maxQuotedBytes), jsonKind(ute.Type.String())))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return badRequest("unknown_field", textcut.Truncate(name, maxFieldBytes), fmt.Sprintf("unknown field %s; see /openapi.json for the accepted fields", quoted(name)))
	}
	var fe *fieldError
	if errors.As(err, &fe) {
		return badRequest("invalid_value", fe.field, textcut.Truncate(fe.msg, maxMessageBytes))
	}
	return badRequest("malformed_json", "", textcut.Truncate(err.Error(), maxMessageBytes))
}

// fieldError is returned by custom UnmarshalJSON methods to name the field.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

func orBody(field string) string {
	if field == "" {
		return "the body"
	}
	return field
}

func jsonKind(goType string) string {
	switch {
	case strings.HasPrefix(goType, "uint"):
		return "a non-negative integer in range"
	case strings.HasPrefix(goType, "int"):
		return "an integer in range"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	}
	return "an object"
}
