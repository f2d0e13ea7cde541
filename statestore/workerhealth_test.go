package statestore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

func down(id string, at int64) *pb.WorkerHealth {
	return &pb.WorkerHealth{WorkerId: id, ObservedAtUnixNano: at, Reason: pb.HealthReason_HEALTH_REASON_SCRAPE_FAILED,
		Source: pb.HealthSource_HEALTH_SOURCE_INGEST_SCRAPE, Detail: "dial tcp 127.0.0.1:1: connect: connection refused", Observer: "ingest-0"}
}

func up(id string, at int64) *pb.WorkerHealth {
	return &pb.WorkerHealth{WorkerId: id, Healthy: true, ObservedAtUnixNano: at, Reason: pb.HealthReason_HEALTH_REASON_RECOVERED,
		Source: pb.HealthSource_HEALTH_SOURCE_INGEST_SCRAPE, Observer: "ingest-0"}
}

// unhealthyOf reads the decider-facing flag of every worker of the view, by id.
func unhealthyOf(h *harness) map[string]bool {
	out := map[string]bool{}
	h.s.Read(func(v View) {
		for _, w := range v.Workers() {
			out[w.ID] = w.Unhealthy
		}
	})
	return out
}

func (h *harness) transitions(to, reason string) float64 {
	return h.counter("pdrouter_worker_health_transitions_total", map[string]string{"to": to, "reason": reason})
}

// TestWorkerHealthIsAppliedState: a worker is excluded from the moment its
// unhealthy record is applied, not before; GET /v1/workers' source (Health)
// names the record's place on the log; a recovered record brings it back;
// the state survives a reopen; the metrics count each transition once.
func TestWorkerHealthIsAppliedState(t *testing.T) {
	h := newHarness(t, 4)
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 2))
	h.put("d2", registration("d2", pb.Pool_POOL_DECODE, 4, 1))
	h.put("d1", &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "d1", DpRank: 1}, SampleTimeUnixNano: 5})
	if got := unhealthyOf(h); got["d1"] || got["d1/dp1"] || got["d2"] {
		t.Fatalf("unhealthy before any health record: %v", got)
	}
	if n := h.transitions("unhealthy", "scrape_failed"); n != 0 {
		t.Fatalf("transitions before any record = %v", n)
	}
	rec := h.record("d1", down("d1", 10))
	h.apply(rec)
	if got := unhealthyOf(h); !got["d1"] || !got["d1/dp1"] || got["d2"] {
		t.Fatalf("after d1's unhealthy record: %v, want d1 (both ranks) only", got)
	}
	h.s.Read(func(v View) {
		hi := v.Health("d1")
		if !hi.Known || hi.Healthy || hi.Reason != "scrape_failed" || hi.Source != "ingest_scrape" || hi.Partition != rec.Partition || hi.Offset != rec.Offset {
			t.Fatalf("Health(d1) = %+v, want unhealthy since load/%d@%d", hi, rec.Partition, rec.Offset)
		}
		if hi := v.Health("d2"); hi.Known || !hi.Healthy {
			t.Fatalf("Health(d2) = %+v, want healthy with no record", hi)
		}
	})
	if n := h.counter("pdrouter_workers_unhealthy", nil); n != 1 {
		t.Fatalf("pdrouter_workers_unhealthy = %v, want 1", n)
	}
	// A second unhealthy record (another observer) is no transition.
	again := down("d1", 11)
	again.Reason, again.Source = pb.HealthReason_HEALTH_REASON_CONNECT_REFUSED, pb.HealthSource_HEALTH_SOURCE_DOOR
	h.put("d1", again)
	if n := h.transitions("unhealthy", "scrape_failed") + h.transitions("unhealthy", "connect_refused"); n != 1 {
		t.Fatalf("transitions to unhealthy = %v, want 1", n)
	}
	h.reopen()
	if got := unhealthyOf(h); !got["d1"] || got["d2"] {
		t.Fatalf("after reopen: %v, want d1 still unhealthy", got)
	}
	h.s.Read(func(v View) {
		if hi := v.Health("d1"); hi.Reason != "connect_refused" || hi.Source != "door" {
			t.Fatalf("after reopen Health(d1) = %+v, want the latest record", hi)
		}
	})
	h.put("d1", up("d1", 20))
	if got := unhealthyOf(h); got["d1"] || got["d1/dp1"] {
		t.Fatalf("after the recovered record: %v", got)
	}
	if n := h.transitions("healthy", "recovered"); n != 1 {
		t.Fatalf("transitions{healthy,recovered} = %v, want 1", n)
	}
	if n := h.counter("pdrouter_workers_unhealthy", nil); n != 0 {
		t.Fatalf("pdrouter_workers_unhealthy = %v, want 0", n)
	}
}

// TestWorkerHealthDecisionExcludes: the decider, fed the store's view,
// records the unhealthy worker as excluded for that reason.
func TestWorkerHealthDecisionExcludes(t *testing.T) {
	h := newHarness(t, 2)
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 1))
	h.put("d2", registration("d2", pb.Pool_POOL_DECODE, 4, 1))
	h.put("d1", kvRec("d1", 0, 1, stored(pb.Tier_TIER_DEVICE, nil, []uint64{1, 2}, tokens("X", 0, 1, 4), 4)))
	cfg := decider.DefaultConfig()
	dc, err := decider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	decide := func() *decider.Decision {
		var d *decider.Decision
		h.s.Read(func(v View) {
			d, err = dc.Decide(v, &decider.Request{ID: "r", Model: "m", PromptTokens: 12, Chains: []decider.Chain{{BlockSize: 4, Hashes: chainOf("X", 1, 4)}}})
		})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := decide(); d.DecodeWorker != "d1" {
		t.Fatalf("healthy: picked %s, want d1 (it holds the prefix)", d.DecodeWorker)
	}
	h.put("d1", down("d1", 5))
	d := decide()
	if d.DecodeWorker != "d2" {
		t.Fatalf("d1 unhealthy: picked %s, want d2", d.DecodeWorker)
	}
	for _, c := range d.Candidates {
		if c.Worker == "d1" && (c.Eligible || c.Excluded != decider.ExcludedUnhealthy) {
			t.Fatalf("d1's row %+v, want excluded %q", c, decider.ExcludedUnhealthy)
		}
	}
}

// TestWorkerHealthTombstone: a tombstone forgets a worker's health, and a
// health record stamped before it is ignored whenever it is applied, so a
// worker that deregisters and registers again starts healthy on every
// replica.
func TestWorkerHealthTombstone(t *testing.T) {
	h := newHarness(t, 2)
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 1))
	early := h.record("d1", down("d1", 1)) // stamped before the tombstone
	h.put("d1", down("d1", 1))
	h.put("d1", nil)
	h.apply(early) // applied after it (another interleaving)
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 1))
	if got := unhealthyOf(h); got["d1"] {
		t.Fatalf("re-registered worker still unhealthy: %v", got)
	}
	for k := range dumpKeys(t, h.s) {
		if k[0] == famWorkerUp {
			t.Fatalf("health key %q left after the tombstone", k)
		}
	}
}

// TestWorkerHealthHostile: health records written past NewRecord's checks
// are refused, counted by reason and skipped, never applied and never a
// poison pill: the next good record applies.
func TestWorkerHealthHostile(t *testing.T) {
	h := newHarness(t, 2)
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 1))
	bad := []struct {
		m      *pb.WorkerHealth
		reason string
	}{
		{&pb.WorkerHealth{WorkerId: "d1", Healthy: true, Reason: pb.HealthReason_HEALTH_REASON_SCRAPE_FAILED, Source: pb.HealthSource_HEALTH_SOURCE_DOOR}, events.ReasonHealth},
		{&pb.WorkerHealth{WorkerId: "d1", Reason: pb.HealthReason_HEALTH_REASON_RECOVERED, Source: pb.HealthSource_HEALTH_SOURCE_DOOR}, events.ReasonHealth},
		{&pb.WorkerHealth{WorkerId: "d1", Reason: 99, Source: pb.HealthSource_HEALTH_SOURCE_DOOR}, events.ReasonHealth},
		{&pb.WorkerHealth{WorkerId: "d1", Reason: pb.HealthReason_HEALTH_REASON_ZMQ_DOWN}, events.ReasonHealth},
		{&pb.WorkerHealth{WorkerId: "d1", Reason: pb.HealthReason_HEALTH_REASON_ZMQ_DOWN, Source: 7}, events.ReasonHealth},
		{&pb.WorkerHealth{WorkerId: "", Reason: pb.HealthReason_HEALTH_REASON_ZMQ_DOWN, Source: pb.HealthSource_HEALTH_SOURCE_INGEST_ZMQ}, events.ReasonWorkerID},
		{&pb.WorkerHealth{WorkerId: "d1", Reason: pb.HealthReason_HEALTH_REASON_ZMQ_DOWN, Source: pb.HealthSource_HEALTH_SOURCE_INGEST_ZMQ, Detail: strings.Repeat("x", events.MaxHealthDetailLen+1)}, events.ReasonFieldTooLong},
		{&pb.WorkerHealth{WorkerId: "d1", Reason: pb.HealthReason_HEALTH_REASON_ZMQ_DOWN, Source: pb.HealthSource_HEALTH_SOURCE_INGEST_ZMQ, ObservedAtUnixNano: -1}, events.ReasonNegativeTime},
	}
	for _, b := range bad {
		before := h.invalid(events.TopicLoad, b.reason)
		h.apply(h.raw("d1", b.m))
		if n := h.invalid(events.TopicLoad, b.reason); n != before+1 {
			t.Fatalf("%v: records_invalid{load,%s} = %v, want %v", b.m, b.reason, n, before+1)
		}
	}
	// Bytes that do not parse, under the health schema.
	garbage := h.place(events.TopicLoad, &kgo.Record{Topic: "load", Key: []byte("d1"), Value: []byte{0x0a, 0xff, 0xff},
		Headers: []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte("pdrouter.events.v1.WorkerHealth")}}})
	h.apply(garbage)
	if n := h.counter("pdrouter_records_invalid_total", map[string]string{"topic": "load", "reason": "malformed"}); n != 1 {
		t.Fatalf("records_invalid{load,malformed} = %v, want 1", n)
	}
	if got := unhealthyOf(h); got["d1"] {
		t.Fatal("a refused record changed the worker's health")
	}
	h.put("d1", down("d1", 3))
	if got := unhealthyOf(h); !got["d1"] {
		t.Fatal("the good record after the refused ones did not apply")
	}
}

// TestWorkerHealthUnknownIDsBounded: health records for ids nobody
// registered hold at most maxUnregisteredHealth entries; the rest are
// skipped and counted.
func TestWorkerHealthUnknownIDsBounded(t *testing.T) {
	h := newHarness(t, 2)
	n := maxUnregisteredHealth + 10
	recs := make([]*kgo.Record, 0, n)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("ghost-%d", i)
		recs = append(recs, h.record(id, down(id, int64(i))))
	}
	h.apply(recs...)
	h.s.mu.RLock()
	held := len(h.s.st.health)
	h.s.mu.RUnlock()
	if held != maxUnregisteredHealth {
		t.Fatalf("%d health entries of unregistered ids, want %d", held, maxUnregisteredHealth)
	}
	if got := h.invalid(events.TopicLoad, reasonUnknownWorker); got != 10 {
		t.Fatalf("records_invalid{load,unknown_worker} = %v, want 10", got)
	}
	// A registration takes its id out of the budget: a new ghost fits.
	h.put("ghost-0", registration("ghost-0", pb.Pool_POOL_DECODE, 4, 1))
	h.put("late", down("late", 1))
	h.s.Read(func(v View) {
		if !v.Health("late").Known || !v.Health("ghost-0").Known {
			t.Fatal("a registered id's health or the freed budget was lost")
		}
	})
}

// TestWorkerHealthReplayDeterministic: the same log, with health records,
// replayed in other partition interleavings and batch sizes, gives the same
// digest and the same health.
func TestWorkerHealthReplayDeterministic(t *testing.T) {
	h := newHarness(t, 4)
	for _, id := range []string{"a", "b", "c"} {
		h.put(id, registration(id, pb.Pool_POOL_DECODE, 4, 1))
	}
	for i := int64(0); i < 60; i++ {
		id := []string{"a", "b", "c"}[i%3]
		if i%4 == 1 {
			h.put(id, up(id, i))
		} else {
			h.put(id, down(id, i))
		}
		h.put(id, &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: id}, SampleTimeUnixNano: i})
	}
	want := h.digest()
	wantHealth := unhealthyOf(h)
	if h.transitions("unhealthy", "scrape_failed") == 0 || h.transitions("healthy", "recovered") == 0 {
		t.Fatal("the log makes no transition both ways")
	}
	for seed := uint64(1); seed <= 4; seed++ {
		r := replayStore(t, h.log, rand.New(rand.NewPCG(seed, 3)), h.opts)
		got, err := r.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if got.Hash != want.Hash {
			t.Fatalf("interleaving %d: digest %s, want %s", seed, got, want)
		}
		gotHealth := map[string]bool{}
		r.Read(func(v View) {
			for _, w := range v.Workers() {
				gotHealth[w.ID] = w.Unhealthy
			}
		})
		if fmt.Sprint(gotHealth) != fmt.Sprint(wantHealth) {
			t.Fatalf("interleaving %d: health %v, want %v", seed, gotHealth, wantHealth)
		}
		_ = r.Close()
	}
}

// TestGeneratorWritesHealth: the generator behind the digest tests
// (determinism_test.go) puts applied health records in its logs, so those
// tests cover the rule.
func TestGeneratorWritesHealth(t *testing.T) {
	h := newHarness(t, 4)
	h.apply(genRecords(h, 1, 3000, 12)...)
	if n := h.transitions("unhealthy", "scrape_failed"); n == 0 {
		t.Fatal("the generator's log made no worker unhealthy")
	}
}

// TestWorkerHealthEndsAtALaterLoadSample: a door's connect_refused, which
// no ingest writes a recovered record for, ends at the first load sample
// taken after it; a sample taken before it (in flight when the door saw
// the refusal) does not end it.
func TestWorkerHealthEndsAtALaterLoadSample(t *testing.T) {
	h := newHarness(t, 2)
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 1))
	refused := down("d1", 100)
	refused.Reason, refused.Source = pb.HealthReason_HEALTH_REASON_CONNECT_REFUSED, pb.HealthSource_HEALTH_SOURCE_DOOR
	h.put("d1", refused)
	h.put("d1", &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "d1"}, SampleTimeUnixNano: 99, Origin: "scrape"})
	if got := unhealthyOf(h); !got["d1"] {
		t.Fatal("a sample taken before the refusal ended it")
	}
	later := h.record("d1", &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "d1"}, SampleTimeUnixNano: 101, Origin: "scrape"})
	h.apply(later)
	if got := unhealthyOf(h); got["d1"] {
		t.Fatal("a sample taken after the refusal did not end it")
	}
	h.s.Read(func(v View) {
		hi := v.Health("d1")
		if !hi.Healthy || hi.Reason != "recovered" || hi.Offset != later.Offset || hi.Partition != later.Partition || hi.Observer != "scrape" {
			t.Fatalf("Health(d1) = %+v, want recovered at the sample's place", hi)
		}
	})
	if n := h.transitions("healthy", "recovered"); n != 1 {
		t.Fatalf("transitions{healthy,recovered} = %v, want 1", n)
	}
}
