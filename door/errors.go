package door

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/pdrouter/pdrouter/internal/textcut"
)

// Error is an answer in OpenAI's error shape:
// {"error":{"message","type","param","code"}}. OpenAI clients parse this
// shape (the openai package raises its message), not the API's.
type Error struct {
	Status  int
	Type    string
	Code    string
	Message string
	Param   string
	// RetryAfter, in seconds, is sent as a header when > 0.
	RetryAfter int
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// The error types OpenAI's API uses.
const (
	typeInvalidRequest = "invalid_request_error"
	typeServer         = "server_error"
	typeRateLimit      = "rate_limit_error"
)

func invalid(code, param, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: code, Param: param, Message: msg}
}

func tooLarge(code, param, msg string) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Code: code, Param: param, Message: msg}
}

func badGateway(code, msg string) *Error {
	return &Error{Status: http.StatusBadGateway, Type: typeServer, Code: code, Message: msg}
}

// maxMessageBytes bounds an error's message: it may quote what an engine
// answered, and an answer never grows with a peer's input.
const maxMessageBytes = 1024

type errorJSON struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// body renders e.
func (e *Error) body() []byte {
	out := errorJSON{Message: textcut.Truncate(e.Message, maxMessageBytes), Type: e.Type}
	if e.Param != "" {
		out.Param = &e.Param
	}
	if e.Code != "" {
		out.Code = &e.Code
	}
	b, _ := json.Marshal(struct {
		Error errorJSON `json:"error"`
	}{out})
	return b
}

// fail answers err in OpenAI's shape. An error that is not an *Error is
// unexpected: it is logged and answered 500 without details.
func (d *Door) fail(c *gin.Context, err error) {
	var e *Error
	if !errors.As(err, &e) {
		d.cfg.log.Error("door request failed", "path", c.FullPath(), "err", err)
		e = &Error{Status: http.StatusInternalServerError, Type: typeServer, Code: "internal", Message: "internal error; see the router's log"}
	}
	if e.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	c.Data(e.Status, "application/json", e.body())
	c.Abort()
}
