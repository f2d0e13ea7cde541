package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// decodeBody reads a JSON body strictly: one object, no unknown fields, at
// most limit bytes. Every failure is a precise *Error: 413 for size, 415 for
// another content type, 400 for malformed JSON, with the JSON path of the
// field at fault when known. It returns the raw body, which HTTP ingest keeps
// as the record's raw payload.
func decodeBody(c *gin.Context, limit int64, dst any) ([]byte, error) {
	raw, err := readBody(c, limit, nil)
	if err != nil {
		return nil, err
	}
	if err := decodeJSON(raw, limit, dst); err != nil {
		return nil, err
	}
	return raw, nil
}

// readBody checks the content type and reads the body, at most limit
// bytes, into buf (reused when large enough; nil allocates). A body that
// declares its length is read with one allocation at most.
func readBody(c *gin.Context, limit int64, buf []byte) ([]byte, error) {
	if ct := c.ContentType(); ct != "" && ct != "application/json" {
		return nil, &Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
			Message: fmt.Sprintf("Content-Type is %q; send application/json", ct)}
	}
	r := http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	// One byte more than declared, so the read that sees EOF needs no growth.
	if n := c.Request.ContentLength; n > 0 && n < limit && int64(cap(buf)) < n+1 {
		buf = make([]byte, 0, n+1)
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, jsonError(err, limit)
		}
	}
}

// decodeJSON decodes raw into dst strictly (decodeBody).
func decodeJSON(raw []byte, limit int64, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err, limit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("malformed_json", "", "the body holds more than one JSON value; send exactly one object")
	}
	return nil
}

func jsonError(err error, limit int64) error {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		ute *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return tooLarge("body_too_large", "", fmt.Sprintf("the body is larger than %d bytes", limit))
	case errors.Is(err, io.EOF):
		return badRequest("malformed_json", "", "the body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed_json", "", "the body ends in the middle of a JSON value")
	case errors.As(err, &se):
		return badRequest("malformed_json", "", fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se))
	case errors.As(err, &ute):
		field := ute.Field
		return badRequest("invalid_type", field, fmt.Sprintf("%s: got a JSON %s, want %s", orBody(field), ute.Value, jsonKind(ute.Type.String())))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return badRequest("unknown_field", name, fmt.Sprintf("unknown field %q; see /openapi.json for the accepted fields", name))
	}
	var fe *fieldError
	if errors.As(err, &fe) {
		return badRequest("invalid_value", fe.field, fe.msg)
	}
	return badRequest("malformed_json", "", err.Error())
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
