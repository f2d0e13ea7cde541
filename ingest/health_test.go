package ingest

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// healthOf returns the WorkerHealth records of worker in sink, in order.
func (m *memSink) healthOf(worker string) []*pb.WorkerHealth {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*pb.WorkerHealth
	for i, r := range m.recs {
		if h, ok := r.(*pb.WorkerHealth); ok && h.GetWorkerId() == worker {
			if m.keys[i] != worker {
				panic(fmt.Sprintf("health record of %s keyed %q", worker, m.keys[i]))
			}
			out = append(out, h)
		}
	}
	return out
}

// TestScrapeHealthRule: an engine answers, then stops (its port refuses),
// then answers garbage, then comes back. The scraper writes recovered once
// at its first good scrape, one scrape_failed after the failures in a row
// (not one per failure), and one recovered when it comes back; a worker
// that never fails gets only the first recovered record.
func TestScrapeHealthRule(t *testing.T) {
	var mode atomic.Int32 // 0 ok, 1 garbage
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if mode.Load() == 1 {
			fmt.Fprint(w, "\x00\xffnot metrics{{{\n")
			return
		}
		fmt.Fprint(w, vllmExposition)
	})
	srv := &http.Server{Handler: handler}
	go func() { _ = srv.Serve(ln) }()
	steady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, vllmExposition) }))
	t.Cleanup(steady.Close)

	sink := &memSink{}
	sources := []SourceConfig{
		{WorkerID: "flaky", Topic: "kv@flaky", MetricsURL: "http://" + addr + "/metrics"},
		{WorkerID: "steady", Topic: "kv@steady", MetricsURL: steady.URL + "/metrics"},
	}
	ing, stop := runIngest(t, Config{ScrapeInterval: 50 * time.Millisecond, ScrapeTimeout: 500 * time.Millisecond, Sources: sources}, Deps{Sink: sink})
	defer func() { _ = stop() }()
	reasons := func() []pb.HealthReason {
		var out []pb.HealthReason
		for _, h := range sink.healthOf("flaky") {
			out = append(out, h.GetReason())
		}
		return out
	}
	waitFor(t, 10*time.Second, "first recovered", func() bool { return len(reasons()) == 1 })

	// Killed: the port refuses.
	_ = srv.Close()
	waitFor(t, 10*time.Second, "scrape_failed", func() bool { return len(reasons()) == 2 })
	hs := sink.healthOf("flaky")
	if h := hs[1]; h.GetHealthy() || h.GetReason() != pb.HealthReason_HEALTH_REASON_SCRAPE_FAILED || h.GetDetail() == "" || h.GetSource() != pb.HealthSource_HEALTH_SOURCE_INGEST_SCRAPE {
		t.Fatalf("unhealthy record %v", h)
	}
	// Failures go on: no more records.
	time.Sleep(300 * time.Millisecond)
	if got := reasons(); len(got) != 2 {
		t.Fatalf("records while the failures go on: %v, want 2", got)
	}

	// Back, answering garbage: still failing, counted as malformed, no record.
	mode.Store(1)
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the engine's port was taken meanwhile: %v", err)
	}
	srv2 := &http.Server{Handler: handler}
	go func() { _ = srv2.Serve(ln2) }()
	t.Cleanup(func() { _ = srv2.Close() })
	waitFor(t, 10*time.Second, "malformed reject", func() bool { return ing.Metrics().Rejects.Value("scrape", rejectMalformed) >= 2 })
	if got := reasons(); len(got) != 2 {
		t.Fatalf("garbage metrics wrote %v, want still 2 records", got)
	}
	// Good again: recovered.
	mode.Store(0)
	waitFor(t, 10*time.Second, "recovered", func() bool { return len(reasons()) == 3 })
	if got := reasons(); got[0] != pb.HealthReason_HEALTH_REASON_RECOVERED || got[2] != pb.HealthReason_HEALTH_REASON_RECOVERED {
		t.Fatalf("records %v", got)
	}
	if n := len(sink.healthOf("steady")); n != 1 {
		t.Fatalf("steady worker: %d health records, want 1 (the first recovered)", n)
	}
	if f, r := testutil.ToFloat64(ing.Metrics().Health.WithLabelValues("scrape_failed")), testutil.ToFloat64(ing.Metrics().Health.WithLabelValues("recovered")); f != 1 || r != 3 {
		t.Fatalf("pdrouter_ingest_worker_health_records_total: scrape_failed %v recovered %v, want 1 and 3", f, r)
	}
}

// TestScrapeBadBlockSize: an engine whose cache_config_info reports a block
// size of 0 or past events.MaxBlockSize is counted and logged at each
// scrape, its load samples still go out, and the registration keeps its
// block size.
func TestScrapeBadBlockSize(t *testing.T) {
	for _, bs := range []string{"0", "99999999999"} {
		body := "vllm:num_requests_running{engine=\"0\"} 1\nvllm:cache_config_info{block_size=\"" + bs + "\",num_gpu_blocks=\"100\"} 1\n"
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
		sink := &memSink{}
		ing, stop := runIngest(t, Config{ScrapeInterval: 50 * time.Millisecond, Sources: []SourceConfig{
			{WorkerID: "w", Topic: "kv@w", MetricsURL: srv.URL + "/metrics"}}}, Deps{Sink: sink})
		waitFor(t, 10*time.Second, "invalid_block_size reject", func() bool { return ing.Metrics().Rejects.Value("scrape", rejectBlockSize) >= 2 })
		if err := stop(); err != nil {
			t.Fatalf("block_size %s: ingest stopped: %v", bs, err)
		}
		srv.Close()
		if sink.samplesOf("w") == 0 {
			t.Fatalf("block_size %s: no load samples", bs)
		}
	}
}
