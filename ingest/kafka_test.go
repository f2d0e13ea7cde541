package ingest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// readTopic reads every record of a topic under names until n have been
// read or the deadline passes, and decodes them with events.Decode.
func readTopic(t *testing.T, brokers []string, names events.Names, topic events.Topic, n int) []*events.Envelope {
	t.Helper()
	return readTopicWhere(t, brokers, names, topic, n, func(*events.Envelope) bool { return true })
}

// readTopicWhere reads topic from its start until n records for which keep
// holds, and returns those.
func readTopicWhere(t *testing.T, brokers []string, names events.Names, topic events.Topic, n int, keep func(*events.Envelope) bool) []*events.Envelope {
	t.Helper()
	cl := kafkatest.Client(t, brokers, kgo.ConsumeTopics(names.Physical(topic)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*events.Envelope
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records from %s", len(out), n, topic)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			env, err := events.Decode(names, r)
			if err != nil {
				t.Fatalf("events.Decode: %v", err)
			}
			if keep(env) && len(out) < n {
				out = append(out, env)
			}
		})
	}
	return out
}

func kafkaIngest(t *testing.T, brokers []string, names events.Names, cfg Config, deps Deps) (*Ingest, func() error) {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	cfg.Names = names
	cfg.IngestID = "ingest-test"
	deps.Kafka, deps.KafkaOpts = cl, opts
	return runIngest(t, cfg, deps)
}

// TestKafkaEndToEndVectors: ZMQ bytes from pyzmq -> ingest -> Kafka ->
// events.Decode equal the expected normalized records, on kfake and on the
// real broker.
func TestKafkaEndToEndVectors(t *testing.T) {
	venvPython(t)
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		kafkatest.Migrate(t, brokers, prefix)
		names := events.Names{Prefix: prefix}
		p := startPyPub(t, "--replay", "tcp://127.0.0.1:*", "--topic", "kv@decode-1")
		_, stop := kafkaIngest(t, brokers, names, Config{Sources: []SourceConfig{{WorkerID: "decode-1", Endpoint: p.Pub, Replay: p.Replay}}}, Deps{})
		p.Do(map[string]any{"cmd": "wait_sub"})
		p.Do(map[string]any{"cmd": "vectors", "names": vectorNames()})
		envs := readTopic(t, brokers, names, events.TopicKvEvents, len(payloadVectors())+1)
		if err := stop(); err != nil {
			t.Fatalf("ingest: %v", err)
		}
		var recs []*pb.KvEventRecord
		for _, e := range envs {
			if string(e.Key) != "decode-1" {
				t.Errorf("key %q", e.Key)
			}
			recs = append(recs, e.Message.(*pb.KvEventRecord))
		}
		checkVectorRecords(t, recs, 0, "decode-1")
		for _, r := range recs {
			if r.GetSource().GetIngestId() != "ingest-test" || r.GetSource().GetEngine() != pb.Engine_ENGINE_VLLM {
				t.Errorf("source %v", r.GetSource())
			}
		}
	})
}

const vllmExposition = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.5
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.99
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="27000",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} 1.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="1",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="27000",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} 1.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 123456.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.5
`

// TestKafkaWorkersAndLoad: a registration on workers with a
// kv_events_endpoint is enough for its events to flow (what `dev` relies
// on); the engine's /metrics (a real HTTP server) becomes LoadSamples on
// load, one per DP rank, and the registration is updated with the block
// size and capacity the engine reports.
func TestKafkaWorkersAndLoad(t *testing.T) {
	venvPython(t)
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		kafkatest.Migrate(t, brokers, prefix)
		names := events.Names{Prefix: prefix}
		p := startPyPub(t, "--replay", "tcp://127.0.0.1:*")
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			fmt.Fprint(w, vllmExposition)
		}))
		defer srv.Close()
		reg := &pb.WorkerRegistration{WorkerId: "decode-9", Pool: pb.Pool_POOL_DECODE, Model: "llama", BlockSize: 32,
			KvEventsEndpoint: p.Pub, KvReplayEndpoint: p.Replay, MetricsUrl: srv.URL + "/metrics", Engine: pb.Engine_ENGINE_VLLM}
		rec, err := events.NewRecord(names, events.WorkerKey("decode-9"), reg)
		if err != nil {
			t.Fatal(err)
		}
		admin := kafkatest.Client(t, brokers)
		if err := admin.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		promReg := prometheus.NewRegistry()
		_, stop := kafkaIngest(t, brokers, names, Config{WatchWorkers: true, ScrapeInterval: 200 * time.Millisecond}, Deps{Registerer: promReg})
		p.Do(map[string]any{"cmd": "wait_sub"})
		p.Do(map[string]any{"cmd": "emit", "n": 3, "gen": "map"})
		kv := readTopic(t, brokers, names, events.TopicKvEvents, 4)
		if got := summary([]*pb.KvEventRecord{kv[0].Message.(*pb.KvEventRecord), kv[3].Message.(*pb.KvEventRecord)}); fmt.Sprint(got) != "[R4 2]" {
			t.Errorf("kv records %v", got)
		}
		// The load topic also carries the worker's health (ingest writes it
		// recovered at its first good scrape): the samples are read past it.
		loads := readTopicWhere(t, brokers, names, events.TopicLoad, 2, func(e *events.Envelope) bool {
			_, ok := e.Message.(*pb.LoadSample)
			return ok
		})
		workers := readTopic(t, brokers, names, events.TopicWorkers, 2)
		if err := stop(); err != nil {
			t.Fatalf("ingest: %v", err)
		}
		byRank := map[uint32]*pb.LoadSample{}
		for _, e := range loads {
			l := e.Message.(*pb.LoadSample)
			byRank[l.GetWorker().GetDpRank()] = l
		}
		l0, l1 := byRank[0], byRank[1]
		if l0 == nil || l1 == nil {
			t.Fatalf("load samples per rank: %v", byRank)
		}
		want0 := &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "decode-9"}, NumRequestsRunning: proto.Uint64(7), NumRequestsWaiting: proto.Uint64(3),
			KvUsageRatio: proto.Float64(0.25), KvTotalBlocks: proto.Uint64(27000), KvUsedBlocks: proto.Uint64(6750), Origin: "scrape",
			SampleTimeUnixNano: l0.GetSampleTimeUnixNano()}
		if !proto.Equal(l0, want0) {
			t.Errorf("rank 0 sample\n %v\nwant\n %v", l0, want0)
		}
		if l1.GetNumRequestsRunning() != 2 || l1.GetKvUsageRatio() != 0.5 || l1.GetKvUsedBlocks() != 13500 {
			t.Errorf("rank 1 sample %v", l1)
		}
		upd := workers[1].Message.(*pb.WorkerRegistration)
		if upd.GetBlockSize() != 16 || upd.GetTotalKvBlocks() != 27000 || upd.GetKvEventsEndpoint() != p.Pub || upd.GetPool() != pb.Pool_POOL_DECODE {
			t.Errorf("updated registration %v", upd)
		}
		mfs, err := promReg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, mf := range mfs {
			seen[mf.GetName()] = true
		}
		for _, name := range []string{"pdrouter_ingest_events_total", "pdrouter_ingest_source_resets_total", "pdrouter_ingest_records_produced_total", "pdrouter_ingest_scrapes_total"} {
			if !seen[name] {
				t.Errorf("metric %s not exported", name)
			}
		}
	})
}
