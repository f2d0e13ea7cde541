package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/api/registration"
	"github.com/pdrouter/pdrouter/internal/textcut"
)

// Limits of what the router answers: it is trusted, but a misconfigured
// --router-url can point anywhere.
const (
	// MaxAnswerBytes bounds the answer to a registration or deregistration
	// (the API answers a few hundred bytes).
	MaxAnswerBytes = 64 << 10
	// MaxWorkersAnswerBytes bounds GET /v1/workers: the router's default
	// cap of 4,096 workers, each with up to 1,024 ranks listed, fits in
	// far less.
	MaxWorkersAnswerBytes = 256 << 20
	// DefaultRouterTimeout bounds one request to the router.
	DefaultRouterTimeout = 10 * time.Second
)

// Router is the part of a router replica's HTTP API the watcher uses.
type Router struct {
	base    string
	token   string
	client  *http.Client
	timeout time.Duration
}

// RouterOption configures a Router.
type RouterOption func(*Router)

// WithAuthToken sends "Authorization: Bearer <token>" with every request:
// the router's --auth-token. Empty sends none.
func WithAuthToken(token string) RouterOption { return func(r *Router) { r.token = token } }

// WithHTTPClient replaces the HTTP client (http.DefaultClient's transport by
// default; each request is bounded by the router timeout anyway).
func WithHTTPClient(c *http.Client) RouterOption { return func(r *Router) { r.client = c } }

// WithRouterTimeout bounds each request (DefaultRouterTimeout).
func WithRouterTimeout(d time.Duration) RouterOption { return func(r *Router) { r.timeout = d } }

// NewRouter returns the API client of the replica at base, an http(s) URL
// such as http://pdrouter:8080.
func NewRouter(base string, opts ...RouterOption) (*Router, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("router URL %q: want http(s)://host:port", base)
	}
	r := &Router{base: strings.TrimSuffix(base, "/"), client: &http.Client{}, timeout: DefaultRouterTimeout}
	for _, o := range opts {
		o(r)
	}
	if r.timeout <= 0 {
		return nil, fmt.Errorf("router timeout %v: must be positive", r.timeout)
	}
	return r, nil
}

// RouterError is an answer of the router other than success.
type RouterError struct {
	Method, Path string
	Status       int
	// Code, Field and Message are the API's error body, when it has one.
	Code, Field, Message string
}

func (e *RouterError) Error() string {
	s := fmt.Sprintf("%s %s: %d", e.Method, e.Path, e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Field != "" {
		s += " (field " + e.Field + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Permanent reports whether sending the same request again cannot succeed:
// the router refused its content (4xx), as opposed to being unavailable
// (5xx, 408, 429). A too_many_workers refusal is not permanent: a place may
// free up.
func (e *RouterError) Permanent() bool {
	switch {
	case e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests:
		return false
	case e.Code == "too_many_workers":
		return false
	}
	return e.Status >= 400 && e.Status < 500
}

// Register sends POST /v1/workers.
func (r *Router) Register(ctx context.Context, req registration.Request) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = r.do(ctx, http.MethodPost, "/v1/workers", body, MaxAnswerBytes)
	return err
}

// Deregister sends DELETE /v1/workers/{id}. A worker the router does not
// know is no error: it is gone, as asked (gone is false then).
func (r *Router) Deregister(ctx context.Context, id string) (gone bool, err error) {
	_, err = r.do(ctx, http.MethodDelete, "/v1/workers/"+url.PathEscape(id), nil, MaxAnswerBytes)
	var re *RouterError
	if errors.As(err, &re) && re.Status == http.StatusNotFound && re.Code == "unknown_worker" {
		return false, nil
	}
	return err == nil, err
}

// WorkerIDs sends GET /v1/workers and returns the registered worker ids
// (each once, whatever its ranks) that start with prefix.
func (r *Router) WorkerIDs(ctx context.Context, prefix string) (map[string]bool, error) {
	raw, err := r.do(ctx, http.MethodGet, "/v1/workers", nil, MaxWorkersAnswerBytes)
	if err != nil {
		return nil, err
	}
	var ans struct {
		Workers []struct {
			WorkerID string `json:"worker_id"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("GET /v1/workers: the answer is not a worker list: %w", err)
	}
	ids := map[string]bool{}
	for _, w := range ans.Workers {
		if strings.HasPrefix(w.WorkerID, prefix) {
			ids[w.WorkerID] = true
		}
	}
	return ids, nil
}

// do sends one request and returns the answer's body, read up to limit
// bytes; an answer that does not fit is an error, not a truncated body.
func (r *Router) do(ctx context.Context, method, path string, body []byte, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%s %s: the answer is over %d bytes", method, path, limit)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return raw, nil
	}
	re := &RouterError{Method: method, Path: textcut.Truncate(path, 80), Status: resp.StatusCode}
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Field   string `json:"field"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &eb) == nil {
		re.Code, re.Field, re.Message = textcut.Truncate(eb.Error.Code, 64), textcut.Truncate(eb.Error.Field, 64), textcut.Truncate(eb.Error.Message, 512)
	}
	return nil, re
}
