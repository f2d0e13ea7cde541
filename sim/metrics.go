package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// The metric names a vLLM V1 server exposes that routers and ingest read
// (kv-event-formats.md §7). Every series carries model_name and engine (the DP rank).
const (
	metricRunning       = "vllm:num_requests_running"
	metricWaiting       = "vllm:num_requests_waiting"
	metricKVUsage       = "vllm:kv_cache_usage_perc"
	metricCacheConfig   = "vllm:cache_config_info"
	metricPrefixQueries = "vllm:prefix_cache_queries_total"
	metricPrefixHits    = "vllm:prefix_cache_hits_total"
	metricPreemptions   = "vllm:num_preemptions_total"
	// metricPrefillComputed is a histogram of the prompt tokens each request had
	// computed here (not found in the prefix cache, not pulled from a prefill
	// engine). The simulator exports its _sum and _count with the +Inf bucket only.
	metricPrefillComputed = "vllm:request_prefill_kv_computed_tokens"
)

// MetricsSample is what an engine's /metrics reports; the fleet stores a fresh one
// after every step, and the HTTP handler reads the latest.
type MetricsSample struct {
	Running, Waiting int
	KVUsage          float64
	// PrefixQueries and PrefixHits count prompt tokens looked up in and found in the
	// prefix cache.
	PrefixQueries, PrefixHits uint64
	// PrefillComputed sums the prompt tokens computed over PrefillRequests, the
	// requests whose prompt this engine computed.
	PrefillComputed, PrefillRequests uint64
}

// MetricsServer serves one engine's /metrics in Prometheus text format.
type MetricsServer struct {
	model     string
	blockSize int
	numBlocks int
	dpRank    int
	sample    atomic.Pointer[MetricsSample]
	srv       *http.Server
	ln        net.Listener
}

// NewMetricsHandler returns the /metrics text of an engine without a listener (for
// tests and embedding).
func NewMetricsHandler(model string, blockSize, numBlocks, dpRank int) *MetricsServer {
	m := &MetricsServer{model: model, blockSize: blockSize, numBlocks: numBlocks, dpRank: dpRank}
	m.sample.Store(&MetricsSample{})
	return m
}

// StartMetrics listens on addr (127.0.0.1:0 picks a port) and serves /metrics.
func StartMetrics(addr, model string, blockSize, numBlocks, dpRank int) (*MetricsServer, error) {
	m := NewMetricsHandler(model, blockSize, numBlocks, dpRank)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sim: metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m)
	m.ln = ln
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener closed under us; Close reports nothing more useful
		}
	}()
	return m, nil
}

// URL is the scrape URL.
func (m *MetricsServer) URL() string {
	if m.ln == nil {
		return ""
	}
	return "http://" + m.ln.Addr().String() + "/metrics"
}

// Set stores the latest sample.
func (m *MetricsServer) Set(s MetricsSample) { m.sample.Store(&s) }

// Close stops the server.
func (m *MetricsServer) Close() error {
	if m.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return m.srv.Shutdown(ctx)
}

// ServeHTTP writes the exposition.
func (m *MetricsServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(m.Text())
}

// Text renders the current sample in the classic Prometheus text format.
func (m *MetricsServer) Text() []byte {
	s := m.sample.Load()
	var b bytes.Buffer
	labels := fmt.Sprintf(`engine="%d",model_name=%s`, m.dpRank, strconv.Quote(m.model))
	metric := func(name, typ, help, lbl, value string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %s\n", name, help, name, typ, name, lbl, value)
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	metric(metricRunning, "gauge", "Number of requests in model execution batches.", labels, strconv.Itoa(s.Running))
	metric(metricWaiting, "gauge", "Number of requests waiting to be processed.", labels, strconv.Itoa(s.Waiting))
	metric(metricKVUsage, "gauge", "KV-cache usage. 1 means 100 percent usage.", labels, f(s.KVUsage))
	metric(metricPrefixQueries, "counter", "Prefix cache queries, in terms of number of queried tokens.", labels, strconv.FormatUint(s.PrefixQueries, 10))
	metric(metricPrefixHits, "counter", "Prefix cache hits, in terms of number of cached tokens.", labels, strconv.FormatUint(s.PrefixHits, 10))
	metric(metricPreemptions, "counter", "Cumulative number of preemptions from the engine.", labels, "0")
	fmt.Fprintf(&b, "# HELP %s Histogram of new KV tokens computed during prefill (excluding cached tokens).\n# TYPE %s histogram\n", metricPrefillComputed, metricPrefillComputed)
	fmt.Fprintf(&b, "%s_bucket{%s,le=\"+Inf\"} %d\n%s_sum{%s} %d\n%s_count{%s} %d\n", metricPrefillComputed, labels, s.PrefillRequests,
		metricPrefillComputed, labels, s.PrefillComputed, metricPrefillComputed, labels, s.PrefillRequests)
	// cache_config_info: an info gauge whose labels are the cache config, stringified.
	cfg := fmt.Sprintf(`block_size="%d",cache_dtype="auto",enable_prefix_caching="True",engine="%d",gpu_memory_utilization="%s",model_name=%s,num_cpu_blocks="None",num_gpu_blocks="%d",prefix_caching_hash_algo="sha256"`,
		m.blockSize, m.dpRank, f(vllmGPUMemoryUtilization), strconv.Quote(m.model), m.numBlocks)
	metric(metricCacheConfig, "gauge", "Information of the LLMEngine CacheConfig", cfg, "1")
	return b.Bytes()
}
