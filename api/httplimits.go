package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// limits enforces the request-level bounds before anything else reads the
// request: the size of its head (431) and the time its body may take.
//
// The head's bound is checked here rather than left to http.Server's
// MaxHeaderBytes, whose refusal is Go's plain-text 431 written before any
// handler: the server is built with a larger MaxHeaderBytes (cmd/pdrouter),
// so heads between the two bounds get the API's JSON error. Heads over the
// server's own bound still get Go's plain answer.
//
// The body's deadline is the connection's read deadline, set when the
// request reaches the API and lifted when the body has been read
// (readBody). http.Server.ReadTimeout is not used for it: its deadline
// stays on the connection after the body, and the server's background read
// then cancels the request's context once it passes, which would cut off a
// long `after` wait or a snapshot download.
func (s *Server) limits(c *gin.Context) {
	if n := headBytes(c.Request); s.cfg.maxHeaderBytes > 0 && n > s.cfg.maxHeaderBytes {
		c.Header("Connection", "close")
		fail(c, &Error{Status: http.StatusRequestHeaderFieldsTooLarge, Code: "headers_too_large",
			Message: fmt.Sprintf("the request line and headers are %d bytes; at most %d", n, s.cfg.maxHeaderBytes)})
		return
	}
	if s.cfg.readTimeout > 0 && c.Request.ContentLength != 0 {
		// Not every ResponseWriter supports deadlines (a recorder in
		// tests); the body is then read without one.
		_ = http.NewResponseController(c.Writer).SetReadDeadline(time.Now().Add(s.cfg.readTimeout))
	}
}

// liftReadDeadline removes the body's read deadline once the body is in.
func liftReadDeadline(c *gin.Context) {
	_ = http.NewResponseController(c.Writer).SetReadDeadline(time.Time{})
}

// headBytes is the size of the request line and headers as they arrived,
// close to what http.Server counts for MaxHeaderBytes.
func headBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	n += len("Host: ") + len(r.Host) + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n + 2
}
