package ingest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseSourceFlag(t *testing.T) {
	s, err := ParseSourceFlag("worker=decode-1,endpoint=tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558,dp=2,engine=sglang,topic=kv@,metrics=http://h/metrics")
	if err != nil {
		t.Fatal(err)
	}
	want := SourceConfig{WorkerID: "decode-1", Endpoint: "tcp://10.0.0.5:5557", Replay: "tcp://10.0.0.5:5558", DPSize: 2, Engine: "sglang", Topic: "kv@", MetricsURL: "http://h/metrics"}
	if s != want {
		t.Errorf("got %+v", s)
	}
	specs, err := s.specs()
	if err != nil || len(specs) != 2 || specs[1].Endpoint != "tcp://10.0.0.5:5558" || specs[1].Replay != "tcp://10.0.0.5:5559" || specs[1].DPRank != 1 {
		t.Errorf("specs %+v %v", specs, err)
	}
	for _, bad := range []string{
		"endpoint=tcp://h:1",
		"worker=w",
		"worker=w,endpoint=tcp://*:5557",
		"worker=w,endpoint=http://h:1",
		"worker=w,endpoint=tcp://h:1,dp=x",
		"worker=w,endpoint=tcp://h:1,eng=v",
		"worker=w,endpoint=tcp://h:1,engine=foo",
		"worker=w w,endpoint=tcp://h:1",
	} {
		if _, err := ParseSourceFlag(bad); err == nil {
			t.Errorf("ParseSourceFlag(%q) accepted", bad)
		}
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"bind": "tcp://0.0.0.0:5557", "sources": [{"worker_id": "d1", "endpoint": "tcp://h:5557", "dp_size": 4}, {"worker_id": "p1", "topic": "kv@p1"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fc, err := LoadFile(good)
	if err != nil || fc.Bind != "tcp://0.0.0.0:5557" || len(fc.Sources) != 2 || fc.Sources[0].DPSize != 4 {
		t.Fatalf("%+v %v", fc, err)
	}
	typo := filepath.Join(dir, "typo.json")
	if err := os.WriteFile(typo, []byte(`{"sources": [{"worker_id": "d1", "endpiont": "tcp://h:5557"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(typo); err == nil || !strings.Contains(err.Error(), "endpiont") {
		t.Errorf("typo accepted: %v", err)
	}
}

const sglangExposition = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="Qwen/Qwen3-0.6B",dp="0"} 4.0
sglang:num_running_reqs{model_name="Qwen/Qwen3-0.6B",dp="1"} 1.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="Qwen/Qwen3-0.6B",dp="0"} 2.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{model_name="Qwen/Qwen3-0.6B",dp="0"} 1000.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="Qwen/Qwen3-0.6B",dp="0"} 0.0625
# HELP sglang:max_total_num_tokens Maximum total number of tokens.
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="Qwen/Qwen3-0.6B",dp="0"} 16000.0
`

func TestParseEngineMetricsSGLang(t *testing.T) {
	loads, err := ParseEngineMetrics(strings.NewReader(sglangExposition))
	if err != nil {
		t.Fatal(err)
	}
	if len(loads) != 2 || loads[0].DPRank != 0 || loads[1].DPRank != 1 {
		t.Fatalf("loads %+v", loads)
	}
	s := LoadSampleOf("sgl-1", loads[0], timeZero, 16)
	if s.GetNumRequestsRunning() != 4 || s.GetNumRequestsWaiting() != 2 || s.GetKvTotalBlocks() != 1000 || s.GetKvUsedBlocks() != 63 || s.GetKvUsageRatio() != 0.0625 {
		t.Errorf("sample %v", s)
	}
	if s1 := LoadSampleOf("sgl-1", loads[1], timeZero, 16); s1.NumRequestsWaiting != nil || s1.GetNumRequestsRunning() != 1 {
		t.Errorf("rank 1 sample %v: an absent metric must stay absent", s1)
	}
}

func TestParseEngineMetricsOldVLLMName(t *testing.T) {
	in := "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.4\n"
	loads, err := ParseEngineMetrics(strings.NewReader(in))
	if err != nil || len(loads) != 1 || *loads[0].KvUsage != 0.4 {
		t.Fatalf("%+v %v", loads, err)
	}
	if _, err := ParseEngineMetrics(strings.NewReader("vllm:num_requests_running{ 3\n")); err == nil {
		t.Error("malformed exposition accepted")
	}
}

// FuzzParseEngineMetrics: the scrape parser never panics, and what it
// returns makes valid load samples.
func FuzzParseEngineMetrics(f *testing.F) {
	f.Add(sglangExposition)
	f.Add(vllmExposition)
	f.Fuzz(func(t *testing.T, in string) {
		loads, err := ParseEngineMetrics(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, l := range loads {
			s := LoadSampleOf("w", l, timeZero, 16)
			if r := s.KvUsageRatio; r != nil && (*r < 0 || *r > 1) {
				t.Fatalf("usage %v", *r)
			}
		}
	})
}

var timeZero = time.Unix(0, 0)
