package ingest_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/ingest"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/internal/rejects"
	"github.com/pdrouter/pdrouter/sim"
)

// longStored is one BlockStored of a long-context prompt: tokens token ids
// in blocks of 16, drawn (seeded) from a real vocabulary's range so they
// take three varint bytes each and compress as little as real ones.
func longStored(tokens int) sim.KVEvent {
	const bs = 16
	rng := rand.New(rand.NewPCG(uint64(tokens), 7))
	ev := sim.KVEvent{Kind: sim.BlockStored, BlockSize: bs, Tokens: make([]uint32, tokens), Hashes: make([]uint64, tokens/bs)}
	for i := range ev.Tokens {
		ev.Tokens[i] = 20000 + rng.Uint32N(131000)
	}
	for i := range ev.Hashes {
		ev.Hashes[i] = rng.Uint64()
	}
	return ev
}

// publishUntil publishes a small marker batch every 100 ms until stop is
// closed: ingest learns of the engine from a live message, and replays what
// it missed from the engine's buffer.
func publishUntil(t *testing.T, pub *sim.Publisher, stop <-chan struct{}) {
	t.Helper()
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_, _, _ = pub.Publish(1, []sim.KVEvent{{Kind: sim.BlockRemoved, Hashes: []uint64{1}}})
			}
		}
	}()
}

// ran is a running ingest: done is closed when it stops, err is then why.
type ran struct {
	ing  *ingest.Ingest
	done chan struct{}
	err  error
}

// exited reports whether ingest has stopped, and its error.
func (r *ran) exited() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// startIngest runs ingest on brokers until the test ends.
func startIngest(t *testing.T, cfg ingest.Config, deps ingest.Deps, brokers []string, opts ...kgo.Opt) *ran {
	t.Helper()
	kopts := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)
	cl := kafkatest.Client(t, brokers, opts...)
	deps.Kafka, deps.KafkaOpts = cl, kopts
	if deps.Log == nil {
		deps.Log = slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ing, err := ingest.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &ran{ing: ing, done: make(chan struct{})}
	go func() { r.err = ing.Run(ctx); close(r.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Errorf("ingest did not stop within 30s")
		}
	})
	return r
}

// storedOf reads the kv-events records of worker until the BlockStored
// events among them hold want blocks, or ingest exits, or a minute passes.
func storedOf(t *testing.T, brokers []string, names events.Names, worker string, want int, r *ran) (stored []*pb.BlockStored, resets []*pb.SourceReset) {
	t.Helper()
	cl := kafkatest.Client(t, brokers, kgo.ConsumeTopics(names.Physical(events.TopicKvEvents)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	blocks := 0
	for blocks < want {
		if done, err := r.exited(); done {
			t.Fatalf("ingest exited after %d of %d blocks: %v", blocks, want, err)
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("%d of %d blocks on the topic after a minute", blocks, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			env, err := events.Decode(names, r)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			rec := env.Message.(*pb.KvEventRecord)
			if rec.GetWorker().GetWorkerId() != worker {
				return
			}
			for _, e := range rec.GetEvents() {
				if s := e.GetStored(); s != nil {
					stored = append(stored, s)
					blocks += len(s.GetBlockHashes())
				}
				if sr := e.GetSourceReset(); sr != nil {
					resets = append(resets, sr)
				}
			}
		})
	}
	return stored, resets
}

// checkChain checks that the BlockStored events, in log order, are the
// event ev split by blocks: the same hashes and tokens, each part's parent
// the last block of the part before.
func checkChain(t *testing.T, parts []*pb.BlockStored, ev sim.KVEvent) {
	t.Helper()
	var hashes []uint64
	var tokens []uint32
	for i, p := range parts {
		switch {
		case i == 0 && p.ParentBlockHash != nil:
			t.Errorf("part 0 has parent %x; the event had none", p.GetParentBlockHash())
		case i > 0 && (p.ParentBlockHash == nil || p.GetParentBlockHash() != hashes[len(hashes)-1]):
			t.Errorf("part %d: parent %v, want the previous part's last block %x", i, p.ParentBlockHash, hashes[len(hashes)-1])
		}
		if p.GetBlockSize() != uint32(ev.BlockSize) {
			t.Errorf("part %d: block size %d", i, p.GetBlockSize())
		}
		hashes = append(hashes, p.GetBlockHashes()...)
		tokens = append(tokens, p.GetTokenIds()...)
	}
	if !slices.Equal(hashes, ev.Hashes) || !slices.Equal(tokens, ev.Tokens) {
		t.Errorf("the parts hold %d blocks and %d tokens, want the event's %d and %d, in order", len(hashes), len(tokens), len(ev.Hashes), len(ev.Tokens))
	}
}

// TestLongContextBatchIsSplit: a 350k-token BlockStored, published over
// ZMQ by an engine publisher, is bigger than a Kafka record may be. It must
// reach the log whole (split into several records by blocks, chained by
// parent hash), and ingest must keep running.
func TestLongContextBatchIsSplit(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		ev := longStored(350_000)
		names, pub := longContextLog(t, brokers, 0, ev)
		r := startIngest(t, ingest.Config{IngestID: "ingest-test", Names: names,
			Sources: []ingest.SourceConfig{{WorkerID: "decode-long", Endpoint: pub.Endpoint(), Replay: pub.ReplayEndpoint()}}}, ingest.Deps{}, brokers)
		stop := make(chan struct{})
		defer close(stop)
		publishUntil(t, pub, stop)
		parts, _ := storedOf(t, brokers, names, "decode-long", len(ev.Hashes), r)
		checkChain(t, parts, ev)
		if len(parts) < 2 {
			t.Errorf("the event reached the log in %d part(s); it is too big for one record", len(parts))
		}
		time.Sleep(500 * time.Millisecond)
		if done, err := r.exited(); done {
			t.Fatalf("ingest exited: %v", err)
		}
	})
}

// setMaxMessageBytes sets the kv-events topic's max.message.bytes.
func setMaxMessageBytes(t *testing.T, brokers []string, names events.Names, n int) {
	t.Helper()
	// A record produced before the broker serves the new limit is taken
	// under the old one, and a test of the refusal then waits for one that
	// never comes.
	kafkatest.SetTopicConfig(t, brokers, names.Physical(events.TopicKvEvents), "max.message.bytes", strconv.Itoa(n))
}

// TestLongContextSmallTopicLimit: on a kv-events topic that takes batches
// of at most 128 KiB, ingest told so (--max-record-bytes and its client's
// batch bound, ingest.ProducerOpts) writes the 350k-token BlockStored in
// parts small enough, all of them, and keeps running.
func TestLongContextSmallTopicLimit(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		ev := longStored(350_000)
		names, pub := longContextLog(t, brokers, 128<<10, ev)
		const limit = 100 << 10
		reg := prometheus.NewRegistry()
		r := startIngest(t, ingest.Config{IngestID: "ingest-test", Names: names, MaxRecordBytes: limit,
			Sources: []ingest.SourceConfig{{WorkerID: "decode-long", Endpoint: pub.Endpoint(), Replay: pub.ReplayEndpoint()}}},
			ingest.Deps{Registerer: reg}, brokers, ingest.ProducerOpts(limit)...)
		stop := make(chan struct{})
		defer close(stop)
		publishUntil(t, pub, stop)
		parts, _ := storedOf(t, brokers, names, "decode-long", len(ev.Hashes), r)
		checkChain(t, parts, ev)
		if len(parts) < 10 {
			t.Errorf("the event reached the log in %d parts; at %d bytes a record it needs at least 10", len(parts), limit)
		}
		if got := r.ing.Metrics().Rejects.Value(rejects.Produce, "record_too_large"); got != 0 {
			t.Errorf("records refused as too large: %v, want 0", got)
		}
		if done, err := r.exited(); done {
			t.Fatalf("ingest exited: %v", err)
		}
	})
}

// TestRefusedRecordResetsWorker: when the broker refuses a record anyway
// (its topic takes less than ingest was told), ingest drops it, counts it
// (produce/record_too_large), writes a SourceReset of that worker so
// replicas drop its blocks instead of missing the batch, and keeps running:
// the engine's later batches still arrive.
func TestRefusedRecordResetsWorker(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		names, pub := longContextLog(t, brokers, 64<<10, longStored(100_000))
		r := startIngest(t, ingest.Config{IngestID: "ingest-test", Names: names,
			Sources: []ingest.SourceConfig{{WorkerID: "decode-big", Endpoint: pub.Endpoint(), Replay: pub.ReplayEndpoint()}}},
			ingest.Deps{}, brokers)
		stop := make(chan struct{})
		defer close(stop)
		publishUntil(t, pub, stop)
		// Then a small BlockStored: it must arrive after the refusal.
		waitUntil(t, 90*time.Second, "the refusal counted", func() bool {
			return r.ing.Metrics().Rejects.Value(rejects.Produce, "record_too_large") >= 1
		})
		small := longStored(32)
		small.Hashes = []uint64{77, 78}
		if _, _, err := pub.Publish(2, []sim.KVEvent{small}); err != nil {
			t.Fatal(err)
		}
		stored, resets := storedOf(t, brokers, names, "decode-big", 2, r)
		if len(stored) != 1 || !slices.Equal(stored[0].GetBlockHashes(), small.Hashes) {
			t.Errorf("stored events on the log: %d, want only the small one after the refused big one", len(stored))
		}
		repaired := false
		for _, sr := range resets {
			repaired = repaired || strings.Contains(sr.GetDetail(), "kafka refused")
		}
		if !repaired {
			t.Errorf("no reset on the log repairs the refused record: %v", resets)
		}
		if done, err := r.exited(); done {
			t.Fatalf("ingest exited: %v", err)
		}
	})
}

// longContextLog migrates fresh topics (their kv-events topic taking at
// most maxMessageBytes, when > 0) and starts an engine publisher that has
// published ev as seq 1.
func longContextLog(t *testing.T, brokers []string, maxMessageBytes int, ev sim.KVEvent) (events.Names, *sim.Publisher) {
	t.Helper()
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	names := events.Names{Prefix: prefix}
	if maxMessageBytes > 0 {
		setMaxMessageBytes(t, brokers, names, maxMessageBytes)
	}
	pub, err := sim.StartPublisher(sim.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv@long"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	if _, _, err := pub.Publish(1, []sim.KVEvent{ev}); err != nil {
		t.Fatal(err)
	}
	return names, pub
}

// waitUntil polls cond until it holds or d passes.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
