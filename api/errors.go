package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
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

func notFound(code, msg string) *Error {
	return &Error{Status: http.StatusNotFound, Code: code, Message: msg}
}

func tooLarge(code, field, msg string) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: code, Field: field, Message: msg}
}

func unavailable(code, msg string, retryAfter int) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: code, Message: msg, RetryAfter: retryAfter}
}

// fail writes err as the API's error body and aborts the handler chain.
// An error that is not an *Error is a bug or an unexpected failure: it is
// logged by the caller's middleware and answered as a 500 without details.
func fail(c *gin.Context, err error) {
	var e *Error
	if !errors.As(err, &e) {
		_ = c.Error(err)
		e = &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error; see the router's log"}
	}
	if e.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	c.AbortWithStatusJSON(e.Status, errorBody{Error: e})
}
