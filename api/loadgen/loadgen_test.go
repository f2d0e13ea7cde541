package loadgen

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/events"
)

// replayingRouter answers like a router's idempotency index: a request id
// seen before gets its earlier decision back, flagged as a replay. It
// stands in for the router only to test the generator's own counting.
func replayingRouter(t *testing.T) *httptest.Server {
	var mu sync.Mutex
	seen := map[string]bool{}
	mux := http.NewServeMux()
	accepted := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"offsets":{"kv-events":{"0":1}}}`)
	}
	mux.HandleFunc("POST /v1/workers", accepted)
	mux.HandleFunc("POST /v1/events/kv", accepted)
	mux.HandleFunc("POST /v1/requests/{id}/events", accepted)
	mux.HandleFunc("POST /v1/route", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			RequestID string `json:"request_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !strings.HasPrefix(req.RequestID, "bench-") {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		mu.Lock()
		replay := seen[req.RequestID]
		seen[req.RequestID] = true
		mu.Unlock()
		if replay {
			_, _ = io.WriteString(w, `{"mode":"remote","idempotent_replay":true}`)
			return
		}
		_, _ = io.WriteString(w, `{"mode":"local"}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// TestRunsNeverCountReplays: request ids are unique per run, so a second
// run on the same router makes new decisions; a run that reuses a run id
// gets replays, which are reported as such and never counted as decisions.
func TestRunsNeverCountReplays(t *testing.T) {
	srv := replayingRouter(t)
	cfg := Config{URL: srv.URL, DecodeWorkers: 2, PrefillWorkers: 1, BlockSize: 16, MinTokens: 32, MaxTokens: 64,
		SharedPrefixes: 1, Clients: 2, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, InFlight: 2, Seed: 1}
	for _, run := range []string{"", ""} {
		cfg.RunID = run
		res, err := Run(context.Background(), cfg)
		if err != nil || res.Replays != 0 || res.Requests == 0 || res.Local != res.Requests {
			t.Fatalf("fresh run: %d decisions (%d local), %d replays, %v", res.Requests, res.Local, res.Replays, err)
		}
	}
	cfg.RunID = "fixed"
	if res, err := Run(context.Background(), cfg); err != nil || res.Replays != 0 {
		t.Fatalf("first run of id fixed: %d replays, %v", res.Replays, err)
	}
	// The stub answers new decisions "local" and replays "remote": were a
	// replay counted as a decision, the local count would fall short.
	res, err := Run(context.Background(), cfg)
	if res.Replays == 0 || res.Local != res.Requests || err != nil && !strings.Contains(err.Error(), "replayed earlier decisions") {
		t.Fatalf("run reusing ids: %d decisions (%d local), %d replays, err %v; want the replays apart", res.Requests, res.Local, res.Replays, err)
	}
}

// TestRunReportsWindows: the measured time is cut into windows whose
// decisions add up to the run's.
func TestRunReportsWindows(t *testing.T) {
	srv := replayingRouter(t)
	cfg := Config{URL: srv.URL, DecodeWorkers: 2, PrefillWorkers: 1, BlockSize: 16, MinTokens: 32, MaxTokens: 64,
		SharedPrefixes: 1, Clients: 2, Duration: 550 * time.Millisecond, Warmup: 20 * time.Millisecond, InFlight: 2, Seed: 1,
		Window: 100 * time.Millisecond}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Windows) < 4 {
		t.Fatalf("%d windows in a 550 ms run of 100 ms windows", len(res.Windows))
	}
	// A window may hold no decision when the machine stalls the clients for
	// its length (the race detector in CI, with other packages' tests on the
	// same cores); it then has no p99 either. Most must hold some.
	sum, covered, empty := 0.0, time.Duration(0), 0
	for _, w := range res.Windows {
		if (w.Throughput > 0) != (w.P99 > 0) {
			t.Fatalf("window %+v: a rate without a p99, or a p99 without a rate", w)
		}
		if w.Throughput == 0 {
			empty++
		}
		sum += w.Throughput * w.Elapsed.Seconds()
		covered += w.Elapsed
	}
	if empty > len(res.Windows)/2 {
		t.Fatalf("%d of %d windows hold no decision: %+v", empty, len(res.Windows), res.Windows)
	}
	// A decision a client was recording as the measured time ended may be
	// in the run and not in a window (at most one per client); so are those
	// of a last window under a fifth of a window, which is left out: on a
	// loaded machine (the race detector in CI) late ticks can shorten it
	// below that. Allow the run's rate over the time the windows do not
	// cover.
	uncovered := max(res.Elapsed-covered, 0)
	slack := 2*cfg.Clients + int(float64(res.Requests)*uncovered.Seconds()/res.Elapsed.Seconds()*1.5+0.5)
	if got := int(sum + 0.5); got > res.Requests || got < res.Requests-slack {
		t.Fatalf("windows hold %d decisions; the run %d (windows cover %s of %s)", got, res.Requests, covered, res.Elapsed)
	}
	if uncovered > cfg.Window/5+cfg.Window/2 {
		t.Fatalf("the windows leave %s of the run uncovered; at most a short last window may be left out", uncovered)
	}
}

// TestRunPaced: a paced run sends about its rate (the stub alone answers
// thousands a second): not much more, and, unless the machine stalls its
// clients, not far fewer.
func TestRunPaced(t *testing.T) {
	srv := replayingRouter(t)
	cfg := Config{URL: srv.URL, DecodeWorkers: 2, PrefillWorkers: 1, BlockSize: 16, MinTokens: 32, MaxTokens: 64,
		SharedPrefixes: 1, Clients: 4, Duration: 500 * time.Millisecond, Warmup: 50 * time.Millisecond, InFlight: 2, Seed: 1,
		Rate: 200}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	allowed := cfg.Rate * res.Elapsed.Seconds()
	if float64(res.Requests) > allowed*1.25+float64(cfg.Clients) || float64(res.Requests) < allowed/4 {
		t.Fatalf("%d decisions in %s at %.0f/s; want about %.0f", res.Requests, res.Elapsed, cfg.Rate, allowed)
	}
}

// Without cells the fleet is prefix000 … in order; with cells, every cell
// gets its share, each id in the cell it is counted for, none twice.
func TestWorkerIDs(t *testing.T) {
	if got := workerIDs("w-", 3, 1); !slices.Equal(got, []string{"w-000", "w-001", "w-002"}) {
		t.Fatalf("no cells: %v", got)
	}
	for _, cells := range []int32{2, 4} {
		ids := workerIDs("bench-decode-", 10, cells)
		seen := map[string]bool{}
		for k, id := range ids {
			if c := events.CellOfWorker(id, cells); c.Index != int32(k)%cells || seen[id] {
				t.Fatalf("%d cells: id %d is %s, of cell %s (or repeated)", cells, k, id, c)
			}
			seen[id] = true
		}
	}
}
