package door

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/pdrouter/pdrouter/internal/rejects"
	"github.com/pdrouter/pdrouter/internal/textcut"
)

// upstream calls engines' OpenAI servers.
type upstream struct {
	client  *http.Client
	cfg     *config
	metrics *metrics
}

func newUpstream(cfg *config, m *metrics) *upstream {
	dial := cfg.dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	connect := cfg.connectTimeout
	dialEngine := func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, connect)
		defer cancel()
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, &dialError{err}
		}
		return c, nil
	}
	tr := &engineTransport{
		dial:           dialEngine,
		firstByte:      cfg.firstByte,
		maxHeaderBytes: cfg.maxHeaderBytes,
		maxIdlePerHost: maxIdlePerEngine,
		idleTimeout:    engineIdleTimeout,
		https: &http.Transport{
			// Proxies are ignored: the address connected to is the one the
			// dialer checks (--engine-allow).
			Proxy:                  nil,
			DialContext:            dialEngine,
			MaxIdleConnsPerHost:    maxIdlePerEngine,
			IdleConnTimeout:        engineIdleTimeout,
			ResponseHeaderTimeout:  cfg.firstByte,
			MaxResponseHeaderBytes: cfg.maxHeaderBytes,
			// The door relays each chunk as it comes; compression would make
			// the engine buffer.
			DisableCompression: true,
		},
	}
	return &upstream{
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		cfg:    cfg, metrics: m,
	}
}

// The idle connections kept per engine, and for how long: less than the
// keep-alive timeout of the engines' HTTP servers (uvicorn's 5 s default,
// which vLLM and SGLang keep), so that the door rarely sends a request on a
// connection the engine has already closed.
const (
	maxIdlePerEngine  = 256
	engineIdleTimeout = 4 * time.Second
)

// dialError marks a failure to connect.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// failure is a failed engine call: what the client is answered, whether
// another worker may be tried (the engine produced nothing the client saw),
// and the rejects reason when the engine's answer was refused.
type failure struct {
	err       *Error
	retriable bool
	// clientGone: the client's request ended; nothing is answered.
	clientGone bool
	code       string
	// unreachable: the worker could not be connected to (nothing was
	// sent); worker is the one (set by forward).
	unreachable bool
	worker      string
}

func (f *failure) Error() string { return f.err.Error() }

// maxErrorBody bounds how much of an engine's error answer is read.
const maxErrorBody = 64 << 10

// post sends body to url. ctx carries the call's total deadline and the
// client's cancellation. A 2xx answer is returned for the caller to read
// (and close); anything else is a failure. The caller may reuse body's
// buffer once post returns: the engine transport is done with it then
// (bodybuf.go).
func (u *upstream) post(ctx, clientCtx context.Context, url, requestID string, body []byte) (*http.Response, *failure) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, &failure{err: badGateway("upstream_unreachable", "the worker's http_url is not a URL: "+err.Error()), retriable: true, code: "upstream_unreachable"}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if requestID != "" {
		req.Header.Set("X-Request-Id", requestID)
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, u.classify(ctx, clientCtx, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	u.metrics.rejects.Inc(rejects.DoorUpstream, reasonStatus)
	var j struct {
		Object  string          `json:"object"`
		Error   json.RawMessage `json:"error"`
		Message *string         `json:"message"`
	}
	_ = json.Unmarshal(raw, &j)
	e := engineError(j.Object, j.Error, j.Message, resp.StatusCode)
	if e == nil {
		e = &Error{Status: resp.StatusCode, Type: typeServer, Code: "upstream_error",
			Message: fmt.Sprintf("the engine answered %d: %s", resp.StatusCode, textcut.Truncate(string(raw), 256))}
	}
	// A client error is the request's fault: another worker would refuse
	// it too, and the client gets the engine's answer. Anything else is
	// the worker's, and worth another.
	client := resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests
	if client {
		e.Type = typeInvalidRequest
		if c := engineErrorCode(j.Error); c != "" {
			e.Code = c
		}
		return nil, &failure{err: e, code: "upstream_refused"}
	}
	e.Status = http.StatusBadGateway
	return nil, &failure{err: e, retriable: true, code: "upstream_error"}
}

// classify names a transport error.
func (u *upstream) classify(ctx, clientCtx context.Context, err error) *failure {
	var de *dialError
	var ne net.Error
	var he *headerTooLargeError
	switch {
	case clientCtx.Err() != nil:
		return &failure{err: &Error{Status: 499, Type: typeInvalidRequest, Code: "client_disconnected", Message: "the client went away"}, clientGone: true, code: "client_disconnected"}
	case errors.As(err, &de):
		u.metrics.rejects.Inc(rejects.DoorUpstream, reasonConnect)
		return &failure{err: badGateway("upstream_unreachable", "could not connect to the worker: "+textcut.Truncate(de.err.Error(), 256)), retriable: true, code: "upstream_unreachable",
			unreachable: true}
	case errors.As(err, &he):
		u.metrics.rejects.Inc(rejects.DoorUpstream, reasonHeaderTooLarge)
		return &failure{err: badGateway("upstream_header_too_large", he.Error()), retriable: true, code: "upstream_header_too_large"}
	case ctx.Err() != nil:
		u.metrics.rejects.Inc(rejects.DoorUpstream, reasonTotal)
		return &failure{err: &Error{Status: http.StatusGatewayTimeout, Type: typeServer, Code: "upstream_timeout",
			Message: fmt.Sprintf("the worker did not finish within %s (--door-upstream-timeout)", u.cfg.total)}, retriable: true, code: "upstream_timeout"}
	case errors.As(err, &ne) && ne.Timeout():
		u.metrics.rejects.Inc(rejects.DoorUpstream, reasonFirstByte)
		return &failure{err: &Error{Status: http.StatusGatewayTimeout, Type: typeServer, Code: "upstream_timeout",
			Message: fmt.Sprintf("the worker sent no answer within %s (--door-upstream-first-byte-timeout)", u.cfg.firstByte)}, retriable: true, code: "upstream_timeout"}
	}
	return &failure{err: badGateway("upstream_error", "the worker's connection failed: "+textcut.Truncate(err.Error(), 256)), retriable: true, code: "upstream_error"}
}

// readBody reads a whole 2xx answer, bounded.
func (u *upstream) readBody(resp *http.Response, limit int64) ([]byte, *failure) {
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, &failure{err: badGateway("upstream_error", "reading the worker's answer: "+textcut.Truncate(err.Error(), 256)), retriable: true, code: "upstream_error"}
	}
	if int64(len(raw)) > limit {
		u.metrics.rejects.Inc(rejects.DoorUpstream, reasonRespTooLarge)
		return nil, &failure{err: badGateway("upstream_response_too_large", fmt.Sprintf("the worker's answer is over %d bytes (--door-max-upstream-response-bytes)", limit)), retriable: true, code: "upstream_response_too_large"}
	}
	return raw, nil
}

// maxEngineErrorCode bounds the engine's error code that a client error
// passes on.
const maxEngineErrorCode = 64

// engineErrorCode is the code of an engine's OpenAI error object when it is
// a plain identifier (lower case, digits, underscores, at most
// maxEngineErrorCode bytes), such as context_length_exceeded, which clients
// act on; "" for anything else (vLLM's numeric codes, null, text an engine
// made up), which the door's own code replaces.
func engineErrorCode(errField json.RawMessage) string {
	var e struct {
		Code json.RawMessage `json:"code"`
	}
	var code string
	if json.Unmarshal(errField, &e) != nil || json.Unmarshal(e.Code, &code) != nil ||
		code == "" || len(code) > maxEngineErrorCode {
		return ""
	}
	for i := 0; i < len(code); i++ {
		if c := code[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return ""
		}
	}
	return code
}
