package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/statestore"
)

// harness is one router replica built from real parts: a broker (kfake or
// the real Apache Kafka), a Pebble statestore with its materializer, the
// decider and the API, served over HTTP. Every response the test client
// receives is validated against /openapi.json.
type harness struct {
	t       *testing.T
	brokers []string
	names   events.Names
	store   *statestore.Store
	srv     *httptest.Server
	api     *api.Server
	client  *http.Client
	reg     *prometheus.Registry
}

type harnessOpt struct {
	cfg     func(*decider.Config)
	apiOpts []api.Option
	// log replaces the Kafka event log (for failure injection).
	log func(h *harness) api.EventLog
	// share reads and writes the topics of another harness.
	share *harness
	// store tunes the statestore (its Names and Registerer are the harness's).
	store statestore.Options
	// noRecords leaves Deps.Records unset; records replaces the reader of
	// the decisions topic.
	noRecords bool
	records   api.DecisionReader
	// state, when set, wraps the store's State the API reads.
	state func(*api.StoreState) api.State
	// listener wraps the test server's listener.
	listener func(net.Listener) net.Listener
	// hold, when set, keeps the materializer from reading the log until
	// it is closed: a replica restarted on a log it has not replayed yet.
	hold chan struct{}
}

func newHarness(t *testing.T, brokers []string, o harnessOpt) *harness {
	t.Helper()
	var prefix string
	if o.share != nil {
		prefix = o.share.names.Prefix
	} else {
		prefix = kafkatest.Prefix(t)
		kafkatest.Migrate(t, brokers, prefix)
	}
	h := &harness{t: t, brokers: brokers, names: events.Names{Prefix: prefix}, reg: prometheus.NewRegistry()}
	sopts := o.store
	sopts.Names, sopts.Registerer = h.names, h.reg
	store, err := statestore.Open(filepath.Join(t.TempDir(), "store"), sopts)
	if err != nil {
		t.Fatal(err)
	}
	h.store = store
	conn := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	mat, err := statestore.NewMaterializer(store, statestore.MaterializerOptions{Client: conn})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := api.NewCatchUp(mat, slog.New(slog.DiscardHandler))
	go func() { _ = started.Run(ctx) }()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if o.hold != nil {
			select {
			case <-o.hold:
			case <-ctx.Done():
				return
			}
		}
		_ = mat.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done; mat.Close(); _ = store.Close() })

	cfg := decider.DefaultConfig()
	cfg.ConditionalDisagg, cfg.KVEvents = true, true
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	dec, err := decider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var elog api.EventLog = api.NewGroupLog(kafkatest.Client(t, brokers, api.GroupLogClientOpts()...), h.names, 64<<20, nil)
	if o.log != nil {
		elog = o.log(h)
	}
	opts := append([]api.Option{api.WithMetrics(h.reg, h.reg), api.WithLogger(slog.New(slog.DiscardHandler)),
		api.WithAfterTimeout(3 * time.Second), api.WithAuditTimeout(3 * time.Second)}, o.apiOpts...)
	deps := api.Deps{State: &api.StoreState{Store: store, Lag: mat}, Decider: dec, Log: elog, Names: h.names, Started: started}
	if o.state != nil {
		deps.State = o.state(deps.State.(*api.StoreState))
	}
	switch {
	case o.records != nil:
		deps.Records = o.records
	case !o.noRecords:
		deps.Records = api.NewLogDecisionReader(kafkatest.Client(t, brokers), h.names)
	}
	srv, err := api.New(deps, opts...)
	if err != nil {
		t.Fatal(err)
	}
	h.api = srv
	h.srv = httptest.NewUnstartedServer(srv.Handler())
	if o.listener != nil {
		h.srv.Listener = o.listener(h.srv.Listener)
	}
	h.srv.Start()
	t.Cleanup(h.srv.Close)
	h.client = &http.Client{Timeout: 30 * time.Second, Transport: &openapiCheck{t: t, next: http.DefaultTransport}}
	if o.hold == nil {
		// A replica starts answering once it has caught up with the log.
		deadline := time.Now().Add(10 * time.Second)
		for !started.CaughtUp() {
			if time.Now().After(deadline) {
				t.Fatal("the replica never caught up with the log")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return h
}

// do sends a request and decodes the JSON answer into out (when not nil).
func (h *harness) do(method, path string, body any, out any) (int, http.Header, []byte) {
	h.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, r)
	if err != nil {
		h.t.Fatal(err)
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			h.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode, resp.Header, raw
}

// mustDo is do that fails the test unless the status is want.
func (h *harness) mustDo(want int, method, path string, body any, out any) []byte {
	h.t.Helper()
	code, _, raw := h.do(method, path, body, out)
	if code != want {
		h.t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, raw)
	}
	return raw
}

// offsets is the answer of an ingest endpoint.
type offsets struct {
	Offsets map[string]map[string]int64 `json:"offsets"`
}

// merge folds ingest answers into one `after` vector.
func merge(all ...offsets) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for _, o := range all {
		for t, ps := range o.Offsets {
			if out[t] == nil {
				out[t] = map[string]int64{}
			}
			for p, off := range ps {
				out[t][p] = max(out[t][p], off)
			}
		}
	}
	return out
}

var (
	specOnce   sync.Once
	specRouter routers.Router
	specErr    error
)

// openapiCheck validates every response against the OpenAPI document: a
// response the document does not describe fails the test that got it.
type openapiCheck struct {
	t    *testing.T
	next http.RoundTripper
}

func (c *openapiCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(api.OpenAPI())
		if err == nil {
			err = doc.Validate(context.Background())
		}
		if err == nil {
			doc.Servers = nil
			specRouter, err = legacy.NewRouter(doc)
		}
		specErr = err
	})
	if specErr != nil {
		c.t.Fatalf("openapi.json: %v", specErr)
	}
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	// Route on a copy of the request with the path only.
	rr := req.Clone(context.Background())
	rr.URL.Scheme, rr.URL.Host, rr.Host = "", "", ""
	rr.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := specRouter.FindRoute(rr)
	if err == nil && strings.HasSuffix(rr.URL.Path, "/") != strings.HasSuffix(route.Path, "/") {
		err = fmt.Errorf("%s is not %s", rr.URL.Path, route.Path) // the router ignores a trailing slash
	}
	if err != nil {
		// A path or method outside the document must be refused with the
		// API's error shape (401 first when a token is required, and the
		// refusals of any request: 408, 413, 431).
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		refusal := false
		switch resp.StatusCode {
		case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUnauthorized, http.StatusRequestTimeout,
			http.StatusRequestEntityTooLarge, http.StatusRequestHeaderFieldsTooLarge:
			refusal = true
		}
		if !refusal || json.Unmarshal(body, &e) != nil || e.Error.Code == "" || e.Error.Message == "" {
			c.t.Errorf("openapi: %s %s is not in the document (%v) but answered %d %s", req.Method, req.URL.Path, err, resp.StatusCode, body)
		}
		return resp, nil
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: rr, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		c.t.Errorf("openapi: %s %s → %d does not match the document: %v\nbody: %.500s", req.Method, req.URL.Path, resp.StatusCode, err, body)
	}
	return resp, nil
}

func decodeJSON(t *testing.T, resp *http.Response, out any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("status %d: body is not JSON: %v", resp.StatusCode, err)
	}
}

// activeOn is the active decode blocks h counts on worker.
func activeOn(t *testing.T, h *harness, worker string) int64 {
	t.Helper()
	var ws struct {
		Workers []struct {
			WorkerID           string `json:"worker_id"`
			ActiveDecodeBlocks int64  `json:"active_decode_blocks"`
		} `json:"workers"`
	}
	h.mustDo(http.StatusOK, "GET", "/v1/workers", nil, &ws)
	for _, w := range ws.Workers {
		if w.WorkerID == worker {
			return w.ActiveDecodeBlocks
		}
	}
	t.Fatalf("worker %s not listed", worker)
	return 0
}
