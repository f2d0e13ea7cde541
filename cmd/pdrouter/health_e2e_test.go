package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/ingest"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/sim"
)

// TestWorkerKilledUnderLoad is worker health end to end on the real broker:
// simulated engines (real HTTP servers with vLLM's API and /metrics) serve
// a replica's front door under a steady load; one is killed (its port
// refuses). The door's connect is refused and ingest's scrapes fail; the
// first of them writes an unhealthy record, and the replica excludes the
// worker within 2 scrape intervals of the kill (plus the produce and apply
// of one record); no client request fails before its first byte, since a
// request that met the dead engine then is retried on another worker (a
// stream the kill cut after its first byte cannot be, and ends with an
// error event); once the engine restarts it is healthy again and routed to.
func TestWorkerKilledUnderLoad(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	const interval = 500 * time.Millisecond
	a := quietApp(t, brokers)
	rf := parseRouterFlags(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	icfg := ingest.Config{Names: a.names(), WatchWorkers: true, ScrapeInterval: interval, ScrapeTimeout: interval}
	base := runInProcess(t, ctx, &routerRun{a: a, f: rf, connOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, ingestCfg: &icfg})

	fc := sim.DefaultFleet()
	fc.Prefill, fc.Decode = 0, 3
	es, err := sim.ServeEngines(fc, 20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	hc := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path string, body, out any) int {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(ctx, method, base+path, rd)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				t.Fatalf("%s %s: %v: %s", method, path, err, raw)
			}
		}
		return resp.StatusCode
	}
	var ids []string
	for i := range fc.Decode {
		id := fmt.Sprintf("decode-%d", i)
		ids = append(ids, id)
		u := es.URLs[id]
		if st := call("POST", "/v1/workers", map[string]any{"worker_id": id, "pool": "decode", "model": es.Model, "block_size": 16,
			"http_url": u, "metrics_url": u + "/metrics"}, nil); st != http.StatusAccepted {
			t.Fatalf("register %s: %d", id, st)
		}
	}
	type health struct {
		Healthy bool   `json:"healthy"`
		Reason  string `json:"reason"`
		Detail  string `json:"detail"`
		Since   *struct {
			Offset int64 `json:"offset"`
		} `json:"since"`
	}
	healthOf := func() map[string]health {
		var ws struct {
			Workers []struct {
				WorkerID string `json:"worker_id"`
				Health   health `json:"health"`
			} `json:"workers"`
		}
		call("GET", "/v1/workers", nil, &ws)
		out := map[string]health{}
		for _, w := range ws.Workers {
			out[w.WorkerID] = w.Health
		}
		return out
	}
	waitHealth := func(id string, healthy bool, limit time.Duration) (health, time.Duration) {
		t.Helper()
		start := time.Now()
		for {
			if h, ok := healthOf()[id]; ok && h.Healthy == healthy {
				return h, time.Since(start)
			}
			if time.Since(start) > limit {
				t.Fatalf("%s not healthy=%v within %s: %+v", id, healthy, limit, healthOf())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Every worker is registered and scraped once (ingest writes recovered
	// at its first good scrape; healthy either way).
	for _, id := range ids {
		waitHealth(id, true, 30*time.Second)
	}
	// The load: 6 closed-loop clients through the door, each request a
	// prompt of its own, until stopped; every answer is recorded.
	var (
		mu        sync.Mutex
		failures  []string // before the first byte: a status other than 200, or no answer
		cut       []string // after it: a stream the kill ended (the door cannot retry those)
		decisions []string
		sent      atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stopOnce sync.Once
	stopLoad := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				prompt := make([]int, 48)
				for i := range prompt {
					prompt[i] = 1000*c + 7*n + i
				}
				b, _ := json.Marshal(map[string]any{"model": es.Model, "prompt": prompt, "max_tokens": 4, "stream": n%2 == 0})
				req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/completions", bytes.NewReader(b))
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				sent.Add(1)
				if err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					continue
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				switch {
				case resp.StatusCode != http.StatusOK:
					failures = append(failures, fmt.Sprintf("%d %s", resp.StatusCode, raw))
				case strings.Contains(string(raw), `"error"`):
					cut = append(cut, string(raw))
				default:
					decisions = append(decisions, resp.Header.Get("X-Pdrouter-Decision-Id"))
				}
				mu.Unlock()
			}
		}()
	}
	defer stopLoad()
	time.Sleep(2 * time.Second)
	victim := ids[0]
	killed := time.Now()
	if err := es.Kill(victim); err != nil {
		t.Fatal(err)
	}
	h, took := waitHealth(victim, false, 30*time.Second)
	t.Logf("%s excluded %s after the kill (scrape interval %s): %+v", victim, took.Round(time.Millisecond), interval, h)
	// The door's refused connect or ingest's failed scrapes, whichever
	// record came first.
	if (h.Reason != "scrape_failed" && h.Reason != "connect_refused") || h.Detail == "" || h.Since == nil {
		t.Fatalf("unhealthy record: %+v", h)
	}
	// Two scrape intervals, and one more for the record's produce and apply
	// on a shared machine (took is measured from the first poll, right after
	// the kill).
	if limit := 2*interval + interval; took > limit {
		t.Fatalf("excluded %s after the kill; want within 2 scrape intervals (%s) plus %s for the record to be applied", took, 2*interval, interval)
	}
	// Ingest's scrapes detect it too, whoever was first: its scrape_failed
	// record becomes the worker's latest within 2 scrape intervals of the
	// kill, and a second for the record's produce and apply on a shared
	// machine.
	for {
		if hh := healthOf()[victim]; !hh.Healthy && hh.Reason == "scrape_failed" {
			t.Logf("ingest's scrape_failed record applied %s after the kill", time.Since(killed).Round(time.Millisecond))
			break
		}
		if limit := 2*interval + time.Second; time.Since(killed) > limit {
			t.Fatalf("no scrape_failed record within %s of the kill: %+v", limit, healthOf()[victim])
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Decisions from now on never pick the victim.
	mu.Lock()
	before := len(decisions)
	mu.Unlock()
	time.Sleep(2 * time.Second)
	mu.Lock()
	after := slicesClone(decisions[before:])
	mu.Unlock()
	if len(after) == 0 {
		t.Fatal("no request answered while the worker was down")
	}
	decodeWorkerOf := func(id string) string {
		var d struct {
			DecodeWorker struct {
				WorkerID string `json:"worker_id"`
			} `json:"decode_worker"`
		}
		call("GET", "/v1/decisions/"+id, nil, &d)
		return d.DecodeWorker.WorkerID
	}
	for _, id := range after {
		if decodeWorkerOf(id) == victim {
			t.Fatalf("decision %s picked %s while it was unhealthy", id, victim)
		}
	}
	if err := es.Restart(victim); err != nil {
		t.Fatal(err)
	}
	_, back := waitHealth(victim, true, 30*time.Second)
	t.Logf("%s healthy again %s after the restart", victim, back.Round(time.Millisecond))
	// And routed to again.
	deadline := time.Now().Add(30 * time.Second)
	routedBack := false
	for seen := 0; !routedBack && time.Now().Before(deadline); {
		mu.Lock()
		ds := slicesClone(decisions[len(after)+before+seen:])
		mu.Unlock()
		seen += len(ds)
		for _, id := range ds {
			if decodeWorkerOf(id) == victim {
				routedBack = true
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !routedBack {
		t.Fatalf("%s never routed to again after its restart", victim)
	}
	stopLoad()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d requests sent, %d answered, %d failed before their first byte, %d streams cut after it", sent.Load(), len(decisions), len(failures), len(cut))
	if len(failures) > 0 {
		t.Fatalf("%d client requests failed before their first byte, first: %s", len(failures), failures[0])
	}
	// Only the streams in flight on the victim when it was killed: at most
	// one per client.
	if len(cut) > 6 {
		t.Fatalf("%d streams cut after their first byte, more than the 6 that can have been in flight on the killed engine; first: %s", len(cut), cut[0])
	}
	var m strings.Builder
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(&m, resp.Body)
	resp.Body.Close()
	for _, line := range strings.Split(m.String(), "\n") {
		if strings.HasPrefix(line, "pdrouter_door_retries_total") || strings.HasPrefix(line, "pdrouter_worker_health_transitions_total") ||
			strings.HasPrefix(line, "pdrouter_door_worker_health_reports_total") {
			t.Log(line)
		}
	}
	down := 0
	for _, reason := range []string{"scrape_failed", "connect_refused"} {
		if strings.Contains(m.String(), `pdrouter_worker_health_transitions_total{reason="`+reason+`",to="unhealthy"} 1`) {
			down++
		}
	}
	if down != 1 || !strings.Contains(m.String(), `pdrouter_worker_health_transitions_total{reason="recovered",to="healthy"} 1`) {
		t.Fatal("the transitions to unhealthy and back are not counted once each")
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }
