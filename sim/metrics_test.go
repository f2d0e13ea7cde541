package sim

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pdrouter/pdrouter/ingest"
)

// TestMetricsExposition: /metrics parses with the Prometheus text parser, carries
// vLLM's metric names and labels, and ingest's scraper reads the load back.
func TestMetricsExposition(t *testing.T) {
	m, err := StartMetrics("127.0.0.1:0", "llama", 16, 27000, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Set(MetricsSample{Running: 3, Waiting: 2, KVUsage: 0.25, PrefixQueries: 1000, PrefixHits: 640})
	resp, err := http.Get(m.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body.Bytes()))
	if err != nil {
		t.Fatalf("%v\n%s", err, body.String())
	}
	for name, want := range map[string]float64{
		"vllm:num_requests_running": 3, "vllm:num_requests_waiting": 2, "vllm:kv_cache_usage_perc": 0.25, "vllm:cache_config_info": 1,
	} {
		f := fams[name]
		if f == nil || len(f.GetMetric()) != 1 {
			t.Errorf("%s missing", name)
			continue
		}
		if v := f.GetMetric()[0].GetGauge().GetValue(); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if v := fams["vllm:prefix_cache_hits_total"].GetMetric()[0].GetCounter().GetValue(); v != 640 {
		t.Errorf("prefix hits %v", v)
	}
	labels := map[string]string{}
	for _, lp := range fams["vllm:cache_config_info"].GetMetric()[0].GetLabel() {
		labels[lp.GetName()] = lp.GetValue()
	}
	if labels["block_size"] != "16" || labels["num_gpu_blocks"] != "27000" || labels["model_name"] != "llama" {
		t.Errorf("cache_config_info labels %v", labels)
	}
	loads, err := ingest.Scrape(context.Background(), http.DefaultClient, m.URL())
	if err != nil || len(loads) != 1 {
		t.Fatalf("ingest scrape: %v %v", loads, err)
	}
	l := loads[0]
	if *l.Running != 3 || *l.Waiting != 2 || *l.KvUsage != 0.25 || *l.BlockSize != 16 || *l.KvTotalBlocks != 27000 {
		t.Errorf("ingest read %+v", l)
	}
}
