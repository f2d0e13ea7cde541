package ingest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

func BenchmarkDecodeBatchOneBlock(b *testing.B) {
	payloads, _ := loadVectors(b)
	p := payloads["map_BlockStored_batch"]
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeBatch(p, pb.Engine_ENGINE_VLLM); err != nil {
			b.Fatal(err)
		}
	}
}

// recordSink is the Kafka sink without the client: it builds every record
// as KafkaSink does (validate, encode) and drops it.
type recordSink struct {
	ks    *KafkaSink
	bytes int
}

func (r *recordSink) Produce(_ context.Context, key []byte, m proto.Message) error {
	rec, err := r.ks.record(key, m)
	if err != nil {
		return err
	}
	r.bytes += len(rec.Value)
	return nil
}

// BenchmarkMessagePath is ingest's work per engine message after the
// socket: decode a batch of one-block events, sequence it, build and encode
// its Kafka record (everything but the socket and the Kafka client).
func BenchmarkMessagePath(b *testing.B) {
	for _, k := range []int{1, 32} {
		b.Run(fmt.Sprintf("events=%d", k), func(b *testing.B) {
			payload := oneBlockBatch(b, k, 1)
			m := NewMetrics(nil)
			sink := &recordSink{ks: NewKafkaSink(nil, events.Names{}, m, quietLog())}
			src := newSource(sourceSpec{Worker: "bench", Engine: pb.Engine_ENGINE_VLLM, Endpoint: "tcp://127.0.0.1:1"},
				sourceDeps{sink: sink, metrics: m, log: quietLog(), ingestID: "bench"})
			ctx := context.Background()
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			var seq uint64
			for b.Loop() {
				in := decodeInbound(received{msg: Message{Seq: seq, Payload: payload}, at: time.Now()}, pb.Engine_ENGINE_VLLM)
				if err := src.handle(ctx, in); err != nil {
					b.Fatal(err)
				}
				seq++
			}
			b.ReportMetric(float64(k)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// oneBlockBatch is a map-encoded batch of k one-block BlockStored events.
func oneBlockBatch(t testing.TB, k int, first uint64) []byte {
	evs := make([]any, k)
	for i := range evs {
		evs[i] = map[string]any{"type": "BlockStored", "block_hashes": []any{first + uint64(i)}, "parent_block_hash": nil,
			"token_ids": ints(i*16, 16), "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil}
	}
	return mp(t, []any{1757500000.25, evs, 0})
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// TestBenchZMQToKafka measures one-block events per second from an engine
// publisher over ZMQ into the real broker through one ingest process. It
// runs only with PDR_INGEST_BENCH=1 (it is a measurement, not a check):
//
//	PDR_INGEST_BENCH=1 PDR_INGEST_BENCH_EVENTS=32 PDR_INGEST_BENCH_BATCHES=20000 \
//	  go test -run TestBenchZMQToKafka -v ./ingest
//
// PDR_INGEST_BENCH_PUB picks the publisher (benchpub_test.go): "go"
// (default) or "pyzmq", each a separate process, or "inproc", a go-zeromq
// PUB in this process (its CPU is then counted as ingest's, and its write
// syscall per frame dominates). The CPU reported for ingest is this
// process's own (getrusage self; children are not included); the
// publisher's is reported apart.
func TestBenchZMQToKafka(t *testing.T) {
	if os.Getenv("PDR_INGEST_BENCH") != "1" {
		t.Skip("set PDR_INGEST_BENCH=1 to run the ingest throughput measurement")
	}
	k, _ := strconv.Atoi(os.Getenv("PDR_INGEST_BENCH_EVENTS"))
	n, _ := strconv.Atoi(os.Getenv("PDR_INGEST_BENCH_BATCHES"))
	k, n = max(k, 1), max(n, 1000)
	kind := os.Getenv("PDR_INGEST_BENCH_PUB")
	if kind == "" {
		kind = "go"
	}
	brokers := kafkatest.Brokers(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	names := events.Names{Prefix: prefix}
	payloads := make([][]byte, 64)
	for i := range payloads {
		payloads[i] = oneBlockBatch(t, k, uint64(i*k))
	}
	cfg := func(ep string) Config {
		return Config{QueueSize: 4096, Sources: []SourceConfig{{WorkerID: "bench", Endpoint: ep}}}
	}

	var (
		ing     *Ingest
		stop    func() error
		pubCPU  time.Duration
		cpu0    float64
		t0      time.Time
		publish func() // sends every batch, or waits for the child to
		after   func()
	)
	if kind == "inproc" {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pub := zmq4.NewPub(ctx, zmq4.WithLogger(zmqLogger))
		defer pub.Close()
		if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		ing, stop = kafkaIngest(t, brokers, names, cfg("tcp://"+pub.Addr().String()), Deps{})
		produced := ing.Metrics().Produced.WithLabelValues(names.Physical(events.TopicKvEvents))
		// Wait for the subscription: publish seq 0 until it is written.
		for testutil.ToFloat64(produced) < 2 {
			_ = pub.Send(zmq4.NewMsgFrom([]byte{}, SeqFrame(0), payloads[0]))
			time.Sleep(50 * time.Millisecond)
			if testutil.ToFloat64(produced) >= 2 {
				break
			}
			t.Log("waiting for the subscriber")
		}
		cpu0, t0 = cpuSeconds(), time.Now()
		publish = func() {
			for i := 1; i <= n; i++ {
				if err := pub.Send(zmq4.NewMsgFrom([]byte{}, SeqFrame(uint64(i)), payloads[i%len(payloads)])); err != nil {
					t.Fatal(err)
				}
			}
		}
		after = func() {}
	} else {
		// The child sends seqs 0..n-1 after ingest subscribed: the first is
		// the first-contact reset plus batch 0, so n+1 records.
		p := startBenchPub(t, kind, writePayloads(t, payloads), n)
		ing, stop = kafkaIngest(t, brokers, names, cfg(p.Addr), Deps{})
		p.expect(t, "start")
		cpu0, t0 = cpuSeconds(), time.Now()
		publish = func() {}
		after = func() { pubCPU = p.stop(t) }
	}
	produced := ing.Metrics().Produced.WithLabelValues(names.Physical(events.TopicKvEvents))
	base := 1.0 // the reset record
	if kind == "inproc" {
		base = testutil.ToFloat64(produced)
	}
	publish()
	waitFor(t, 5*time.Minute, "every batch acknowledged", func() bool { return testutil.ToFloat64(produced) >= base+float64(n) })
	wall, cpu := time.Since(t0), cpuSeconds()-cpu0
	after()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if r := testutil.ToFloat64(ing.Metrics().Resets.WithLabelValues("bench", "unrecoverable_gap")); r != 1 {
		t.Errorf("%v resets: batches were lost in the measurement", r)
	}
	if got := testutil.ToFloat64(produced); got != base+float64(n) {
		t.Errorf("%v records produced, want %v", got, base+float64(n))
	}
	evs := float64(n * k)
	msg := fmt.Sprintf("publisher %s: %d batches x %d one-block events = %.0f events in %v: %.0f events/s, %.0f batches/s; ingest CPU %.2fs = %.2f cores",
		kind, n, k, evs, wall.Round(time.Millisecond), evs/wall.Seconds(), float64(n)/wall.Seconds(), cpu, cpu/wall.Seconds())
	if kind != "inproc" {
		msg += fmt.Sprintf("; publisher process CPU %.2fs (whole life)", pubCPU.Seconds())
	}
	t.Log(msg)
}
