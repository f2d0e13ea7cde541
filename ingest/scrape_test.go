package ingest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// samplesOf counts the load samples of worker in sink.
func (m *memSink) samplesOf(worker string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.recs {
		if l, ok := r.(*pb.LoadSample); ok && l.GetWorker().GetWorkerId() == worker && l.GetWorker().GetDpRank() == 0 {
			n++
		}
	}
	return n
}

// TestScrapeSlowEngineDelaysOnlyItself: one worker's metrics URL accepts
// the connection and never answers; the other workers' samples still
// arrive every interval.
func TestScrapeSlowEngineDelaysOnlyItself(t *testing.T) {
	hang := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	defer hang.CloseClientConnections()
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, vllmExposition) }))
	defer good.Close()
	sources := []SourceConfig{{WorkerID: "slow", Topic: "kv@slow", MetricsURL: hang.URL + "/metrics"}}
	for i := range 4 {
		w := fmt.Sprintf("w%d", i)
		sources = append(sources, SourceConfig{WorkerID: w, Topic: "kv@" + w, MetricsURL: good.URL + "/metrics"})
	}
	sink := &memSink{}
	_, stop := runIngest(t, Config{ScrapeInterval: 100 * time.Millisecond, ScrapeTimeout: 30 * time.Second, Sources: sources}, Deps{Sink: sink})
	time.Sleep(2 * time.Second)
	_ = stop()
	for i := range 4 {
		w := fmt.Sprintf("w%d", i)
		// 20 intervals passed; a generous floor, for a loaded machine.
		if n := sink.samplesOf(w); n < 5 {
			t.Errorf("%s: %d samples in 2s at a 100ms interval, while another engine hangs", w, n)
		}
	}
}

// TestScrapeRejectReasons: each way an engine's /metrics answer can be
// refused is counted under its own reason, and none stops ingest.
func TestScrapeRejectReasons(t *testing.T) {
	serve := func(h http.HandlerFunc) string {
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		t.Cleanup(s.CloseClientConnections)
		return s.URL + "/metrics"
	}
	urls := map[string]string{
		"timeout": serve(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }),
		"too_large": serve(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, vllmExposition+strings.Repeat("# padding\n", 2000))
		}),
		"bad_status": serve(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusInternalServerError) }),
		"malformed": serve(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, "vllm:num_requests_running{engine=\"0\" 1\n")
		}),
	}
	var sources []SourceConfig
	for reason, u := range urls {
		w := strings.ReplaceAll(reason, "_", "-")
		sources = append(sources, SourceConfig{WorkerID: w, Topic: "kv@" + w, MetricsURL: u})
	}
	ing, stop := runIngest(t, Config{ScrapeInterval: 50 * time.Millisecond, ScrapeTimeout: 200 * time.Millisecond,
		ScrapeMaxBytes: int64(len(vllmExposition) + 100), Sources: sources}, Deps{Sink: &memSink{}})
	for reason := range urls {
		waitFor(t, 10*time.Second, "scrape rejects "+reason, func() bool { return ing.Metrics().Rejects.Value("scrape", reason) >= 1 })
	}
	if err := stop(); err != nil {
		t.Fatalf("ingest: %v", err)
	}
}
