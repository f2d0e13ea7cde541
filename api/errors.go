package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/pdrouter/pdrouter/internal/textcut"
)

// Error is the one error shape of the API:
// {"error": {"code": "...", "message": "...", "field": "..."}}.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// RetryAfter, in seconds, is sent as a header with 503s.
	RetryAfter int `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

type errorBody struct {
	Error *Error `json:"error"`
}

func badRequest(code, field, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Field: field, Message: msg}
}

func unprocessable(code, field, msg string) *Error {
	return &Error{Status: http.StatusUnprocessableEntity, Code: code, Field: field, Message: msg}
}

func misdirected(code, field, msg string) *Error {
	return &Error{Status: http.StatusMisdirectedRequest, Code: code, Field: field, Message: msg}
}

func notFound(code, msg string) *Error {
	return &Error{Status: http.StatusNotFound, Code: code, Message: msg}
}

func tooLarge(code, field, msg string) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: code, Field: field, Message: msg}
}

func conflict(code, field, msg string) *Error {
	return &Error{Status: http.StatusConflict, Code: code, Field: field, Message: msg}
}

func unavailable(code, msg string, retryAfter int) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: code, Message: msg, RetryAfter: retryAfter}
}

// fail writes err as the API's error body and aborts the handler chain.
// An error that is not an *Error is a bug or an unexpected failure: it is
// logged by the caller's middleware and answered as a 500 without details.
// The code is left in the context for the refusal counter (Server.observe).
// Message and field are cut to a bound: they may quote the request, and an
// answer must never grow with what a client sent.
func fail(c *gin.Context, err error) {
	var e *Error
	if !errors.As(err, &e) {
		_ = c.Error(err)
		e = &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error; see the router's log"}
	}
	if len(e.Message) > maxMessageBytes || len(e.Field) > maxFieldBytes {
		cut := *e
		cut.Message, cut.Field = textcut.Truncate(e.Message, maxMessageBytes), textcut.Truncate(e.Field, maxFieldBytes)
		e = &cut
	}
	if e.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	c.Set(errorCodeKey, e.Code)
	c.AbortWithStatusJSON(e.Status, errorBody{Error: e})
}

// errorCodeKey holds the code of the error a request was answered with.
const errorCodeKey = "pdrouter.error_code"

// The longest message and field an error answer carries, in bytes.
const (
	maxMessageBytes = 1024
	maxFieldBytes   = 256
	// maxQuotedBytes is the most of a client's input (a key, a topic
	// name) that an error message quotes.
	maxQuotedBytes = 64
)

// quoted is input named in an error: truncated (maxQuotedBytes) and quoted.
func quoted(s string) string { return strconv.Quote(textcut.Truncate(s, maxQuotedBytes)) }
