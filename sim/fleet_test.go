package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/ingest"
)

// TestOfflineDeterministic: the same fleet, workload and seed give identical reports.
func TestOfflineDeterministic(t *testing.T) {
	sc := DefaultSynthetic()
	sc.Duration = 40 * time.Second
	w, err := Synthetic(sc)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := PolicyByName("cond-isl_bounding")
	a, err := RunOffline(context.Background(), DefaultFleet(), w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunOffline(context.Background(), DefaultFleet(), w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs differ:\n%s\n%s", a, b)
	}
	if a.Completed != len(w.Requests) || a.Local == 0 || a.Remote == 0 {
		t.Errorf("want every request done and both modes used:\n%s", a)
	}
	t.Logf("synthetic, %d requests:\n%s", len(w.Requests), a)
}

// stubRouter is a minimal stand-in for pdrouter's API: it records registrations and
// lifecycle events and decides by prompt length alone (short prompts local on
// decode-0, long ones remote from prefill-0 to decode-1).
type stubRouter struct {
	mu      sync.Mutex
	workers []WorkerRegistration
	events  map[string][]string
	routed  int
}

func (s *stubRouter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/workers":
		var reg WorkerRegistration
		_ = json.NewDecoder(r.Body).Decode(&reg)
		s.workers = append(s.workers, reg)
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"offsets":{}}`))
	case r.Method == http.MethodGet && r.URL.Path == "/v1/workers":
		var out []map[string]string
		for _, reg := range s.workers {
			out = append(out, map[string]string{"worker_id": reg.WorkerID})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"workers": out})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/route":
		var req struct {
			ID     string   `json:"request_id"`
			Model  string   `json:"model"`
			Tokens []uint32 `json:"token_ids"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		s.routed++
		resp := map[string]any{"request_id": req.ID, "mode": "local", "decode_worker": "decode-0", "prefill_worker": nil, "reason": "bypass_allowed_decode_gate_disabled"}
		if len(req.Tokens) >= 2048 {
			resp = map[string]any{"request_id": req.ID, "mode": "remote", "decode_worker": "decode-1", "prefill_worker": "prefill-0", "reason": "bypass_declined_by_policy"}
		}
		resp["decision_id"] = "dec-" + req.ID
		_ = json.NewEncoder(w).Encode(resp)
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/requests/"):
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/requests/"), "/events")
		s.events[id] = append(s.events[id], body["event"].(string))
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"offsets":{}}`))
	default:
		http.NotFound(w, r)
	}
}

// TestRunFleetLive: RunFleet registers real endpoints, routes every request over
// HTTP, obeys both modes, posts prefill_done then completed for each request, and its
// engines' replay sockets and /metrics answer with what they published.
func TestRunFleetLive(t *testing.T) {
	stub := &stubRouter{events: map[string][]string{}}
	srv := httptest.NewServer(stub)
	defer srv.Close()
	sc := DefaultSynthetic()
	sc.Duration = 6 * time.Second
	w, err := Synthetic(sc)
	if err != nil {
		t.Fatal(err)
	}
	w = w.Head(12)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var regs []WorkerRegistration
	rep, err := RunFleet(ctx, RunConfig{RouterURL: srv.URL, Fleet: DefaultFleet(), TimeScale: 50, Progress: -1},
		w, RunDeps{OnReady: func(r []WorkerRegistration) { regs = r }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != len(w.Requests) || rep.Local == 0 || rep.Remote == 0 || len(rep.Decisions) != len(w.Requests) ||
		rep.Decisions[0] != "dec-"+w.Requests[0].ID {
		t.Fatalf("report (decisions %q):\n%s", rep.Decisions, rep)
	}
	stub.mu.Lock()
	defer stub.mu.Unlock()
	if stub.routed != len(w.Requests) || len(stub.workers) != 4 {
		t.Errorf("routed %d, registered %d", stub.routed, len(stub.workers))
	}
	for _, r := range w.Requests {
		if got := strings.Join(stub.events[r.ID], ","); got != "prefill_done,completed" {
			t.Errorf("%s: lifecycle %q", r.ID, got)
		}
	}
	for _, reg := range regs {
		if !strings.HasPrefix(reg.KVEventsEndpoint, "tcp://127.0.0.1:") || reg.KVReplayEndpoint == "" || reg.MetricsURL == "" || reg.Engine != "sim" {
			t.Errorf("registration %+v", reg)
		}
	}
	_ = ingest.EndSeq
}
