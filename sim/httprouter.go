package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HTTPRouter talks to pdrouter's API (api.md): POST /v1/route for decisions, POST
// /v1/requests/{id}/events for lifecycle events, POST /v1/workers to register.
// Lifecycle events are sent in the background, in order per request, so that the
// simulation does not wait on them; Close waits until they are all sent.
type HTTPRouter struct {
	base   string
	token  string
	model  string
	client *http.Client
	log    *slog.Logger

	events chan lifecycleEvent
	wg     sync.WaitGroup
	failed atomic.Int64
	sent   atomic.Int64
	closed atomic.Bool
}

type lifecycleEvent struct {
	id   string
	body map[string]any
}

// lifecycleWorkers send lifecycle events concurrently; events of one request go to one
// worker (hash of the id), so prefill_done always precedes completed.
const lifecycleWorkers = 4

// NewHTTPRouter returns a client of the router at base (http://127.0.0.1:8080).
// token, if set, is sent as a bearer token. model is the model requests name.
func NewHTTPRouter(base, token, model string, client *http.Client, log *slog.Logger) (*HTTPRouter, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("router URL %q: want http://host:port", base)
	}
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &HTTPRouter{base: strings.TrimRight(base, "/"), token: token, model: model, client: client, log: log,
		events: make(chan lifecycleEvent, 8192)}
	queues := make([]chan lifecycleEvent, lifecycleWorkers)
	for i := range queues {
		queues[i] = make(chan lifecycleEvent, 1024)
		h.wg.Add(1)
		go func(q chan lifecycleEvent) {
			defer h.wg.Done()
			for ev := range q {
				h.sendEvent(ev)
			}
		}(queues[i])
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for ev := range h.events {
			queues[fnv32(ev.id)%lifecycleWorkers] <- ev
		}
		for _, q := range queues {
			close(q)
		}
	}()
	return h, nil
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// APIError is an error answer of the API.
type APIError struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

func (e *APIError) Error() string {
	return fmt.Sprintf("router answered %d %s: %s", e.Status, e.Code, e.Message)
}

// do sends a JSON request and decodes a JSON answer into out (if not nil).
func (h *HTTPRouter) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var eb struct {
			Error APIError `json:"error"`
		}
		_ = json.Unmarshal(data, &eb)
		eb.Error.Status = resp.StatusCode
		if eb.Error.Message == "" {
			eb.Error.Message = strings.TrimSpace(string(data))
		}
		return &eb.Error
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// retryable says whether an API error may go away by itself (not ready, log busy).
func retryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusServiceUnavailable || ae.Status == http.StatusGatewayTimeout
	}
	return false
}

// routeAttempts bounds retries of a route answered 503 (e.g. the state has not yet
// seen the registrations) or 504.
const routeAttempts = 5

// Route implements Router.
func (h *HTTPRouter) Route(ctx context.Context, r *Request, tokens []uint32) (Decision, error) {
	body := map[string]any{"request_id": r.ID, "model": h.model, "token_ids": tokens, "expected_output_tokens": r.OutputLen}
	var resp struct {
		DecisionID    string  `json:"decision_id"`
		Mode          string  `json:"mode"`
		DecodeWorker  string  `json:"decode_worker"`
		PrefillWorker *string `json:"prefill_worker"`
		Reason        string  `json:"reason"`
		CachedTokens  int64   `json:"cached_tokens"`
		EffectiveISL  int64   `json:"effective_isl"`
	}
	var err error
	for attempt := range routeAttempts {
		if err = h.do(ctx, http.MethodPost, "/v1/route", body, &resp); err == nil || !retryable(err) {
			break
		}
		select {
		case <-ctx.Done():
			return Decision{}, ctx.Err()
		case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
		}
	}
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Mode: resp.Mode, DecisionID: resp.DecisionID, DecodeWorker: resp.DecodeWorker, Reason: resp.Reason,
		CachedTokens: resp.CachedTokens, EffectiveISL: resp.EffectiveISL}
	if resp.PrefillWorker != nil {
		d.PrefillWorker = *resp.PrefillWorker
	}
	return d, nil
}

func (h *HTTPRouter) post(id string, body map[string]any) {
	if h.closed.Load() {
		return
	}
	h.events <- lifecycleEvent{id: id, body: body}
}

// PrefillDone implements Router.
func (h *HTTPRouter) PrefillDone(_ context.Context, r *Request, ttft time.Duration) {
	h.post(r.ID, map[string]any{"event": "prefill_done", "ttft_ms": msFloat(ttft)})
}

// Completed implements Router.
func (h *HTTPRouter) Completed(_ context.Context, r *Request, outputTokens int, itl time.Duration) {
	h.post(r.ID, map[string]any{"event": "completed", "output_tokens": outputTokens, "itl_ms_mean": msFloat(itl)})
}

func msFloat(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (h *HTTPRouter) sendEvent(ev lifecycleEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	path := "/v1/requests/" + url.PathEscape(ev.id) + "/events"
	var err error
	for attempt := range 3 {
		if err = h.do(ctx, http.MethodPost, path, ev.body, nil); err == nil || !retryable(err) {
			break
		}
		time.Sleep(time.Duration(100<<attempt) * time.Millisecond)
	}
	if err != nil {
		if h.failed.Add(1) <= 5 {
			h.log.Warn("lifecycle event not accepted", "request", ev.id, "event", ev.body["event"], "err", err)
		}
		return
	}
	h.sent.Add(1)
}

// LifecycleStats reports lifecycle events sent and failed so far.
func (h *HTTPRouter) LifecycleStats() (sent, failed int64) { return h.sent.Load(), h.failed.Load() }

// Close waits until every queued lifecycle event was sent (or failed).
func (h *HTTPRouter) Close() {
	if h.closed.Swap(true) {
		return
	}
	close(h.events)
	h.wg.Wait()
}

// WorkerRegistration is the body of POST /v1/workers.
type WorkerRegistration struct {
	WorkerID            string `json:"worker_id"`
	Pool                string `json:"pool"`
	Model               string `json:"model"`
	BlockSize           int    `json:"block_size"`
	TotalKVBlocks       int    `json:"total_kv_blocks"`
	MaxNumBatchedTokens int    `json:"max_num_batched_tokens"`
	KVEventsEndpoint    string `json:"kv_events_endpoint,omitempty"`
	KVReplayEndpoint    string `json:"kv_replay_endpoint,omitempty"`
	KVEventsTopic       string `json:"kv_events_topic,omitempty"`
	MetricsURL          string `json:"metrics_url,omitempty"`
	// HTTPURL is the engine's OpenAI-compatible base URL without /v1.
	HTTPURL string `json:"http_url,omitempty"`
	Engine  string `json:"engine,omitempty"`
}

// ready reports whether the router answers /readyz 200. A router without
// /readyz (404) counts as ready; any other answer, or none, as not yet.
func (h *HTTPRouter) ready(ctx context.Context) (bool, error) {
	err := h.do(ctx, http.MethodGet, "/readyz", nil, nil)
	var ae *APIError
	if err == nil || errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return true, nil
	}
	return false, err
}

// Register registers a worker. A router older than the http_url field refuses it as
// unknown; the worker is then registered without it (its KV events and metrics still
// flow, only a door cannot reach its API), and the refusal is logged.
func (h *HTTPRouter) Register(ctx context.Context, w WorkerRegistration) error {
	err := h.do(ctx, http.MethodPost, "/v1/workers", w, nil)
	var ae *APIError
	if w.HTTPURL != "" && errors.As(err, &ae) && ae.Status == http.StatusBadRequest && ae.Code == "unknown_field" && strings.Contains(ae.Field, "http_url") {
		h.log.Warn("the router does not know http_url; registering without it", "worker", w.WorkerID)
		w.HTTPURL = ""
		return h.do(ctx, http.MethodPost, "/v1/workers", w, nil)
	}
	return err
}

// WaitWorkers polls the router until it is ready (/readyz) and GET
// /v1/workers lists every id, or ctx ends. Readiness first: a router
// restarted on an existing log lists the workers it read back, the same
// ids a fleet registers again, while it still answers routing 503
// not_ready.
func (h *HTTPRouter) WaitWorkers(ctx context.Context, ids []string) error {
	for {
		ready, err := h.ready(ctx)
		if ready {
			var resp struct {
				Workers []struct {
					WorkerID string `json:"worker_id"`
				} `json:"workers"`
			}
			err = h.do(ctx, http.MethodGet, "/v1/workers", nil, &resp)
			if err == nil {
				seen := map[string]bool{}
				for _, w := range resp.Workers {
					seen[w.WorkerID] = true
				}
				missing := 0
				for _, id := range ids {
					if !seen[id] {
						missing++
					}
				}
				if missing == 0 {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("workers not listed by the router: %w (last error: %v)", ctx.Err(), err)
			}
			return fmt.Errorf("workers not listed by the router: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
