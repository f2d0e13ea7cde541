package statestore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/rejects"
)

// raw frames m like a producer that skips events.NewRecord's validation
// would: the bytes a hostile or buggy writer can put on the log.
func (h *harness) raw(key string, m proto.Message) *kgo.Record {
	h.t.Helper()
	t, err := events.TopicOf(m)
	if err != nil {
		h.t.Fatal(err)
	}
	v, err := proto.Marshal(m)
	if err != nil {
		h.t.Fatal(err)
	}
	r := &kgo.Record{Topic: events.Names{}.Physical(t), Key: []byte(key), Value: v,
		Headers: []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte(m.ProtoReflect().Descriptor().FullName())}}}
	return h.place(t, r)
}

// counter reads one series of the harness's registry (0 when absent).
func (h *harness) counter(name string, labels map[string]string) float64 {
	h.t.Helper()
	if m := h.series(name, labels); m != nil {
		return metricValue(m)
	}
	return 0
}

// series returns the first series of name whose labels include labels,
// or nil.
func (h *harness) series(name string, labels map[string]string) *dto.Metric {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

func metricValue(m *dto.Metric) float64 { return value(m) }

func (h *harness) invalid(topic events.Topic, reason string) float64 {
	return h.counter("pdrouter_records_invalid_total", map[string]string{"topic": string(topic), "reason": reason})
}

func (h *harness) slotCount() (slots, live int) {
	h.s.mu.RLock()
	defer h.s.mu.RUnlock()
	return len(h.s.st.workers), len(h.s.st.slots)
}

// TestDPSizePoisonPill: a registration declaring dp_size 2^32-1, written
// past the API, is skipped and counted; and the largest valid dp_size
// allocates nothing per declared rank, only per rank seen.
func TestDPSizePoisonPill(t *testing.T) {
	h := newHarness(t, 2)
	pill := registration("d1", pb.Pool_POOL_DECODE, 4, math.MaxUint32)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.apply(h.raw("d1", pill))
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("applying a registration with dp_size 2^32-1 did not finish in 20 s")
	}
	if n := h.invalid(events.TopicWorkers, events.ReasonDPSize); n != 1 {
		t.Fatalf("records_invalid{workers,%s} = %v, want 1", events.ReasonDPSize, n)
	}
	h.put("d2", registration("d2", pb.Pool_POOL_DECODE, 4, events.MaxDPSize))
	h.put("d2", kvRec("d2", 7, 1, stored(pb.Tier_TIER_DEVICE, nil, []uint64{1}, tokens("X", 0, 0, 4), 4)))
	if slots, _ := h.slotCount(); slots > 2 {
		t.Fatalf("a worker with dp_size %d that sent events for one rank holds %d slots; want 2 (rank 0 and rank 7)", events.MaxDPSize, slots)
	}
	h.reopen()
	if slots, _ := h.slotCount(); slots > 2 {
		t.Fatalf("after reopen: %d slots, want 2", slots)
	}
	var ids []string
	h.s.Read(func(v View) {
		for _, w := range v.Workers() {
			ids = append(ids, w.ID)
		}
	})
	if fmt.Sprint(ids) != "[d2 d2/dp7]" {
		t.Fatalf("workers %v, want [d2 d2/dp7]", ids)
	}
}

// TestDPRankBeyondDPSize: KV events and load samples for a rank the
// registration does not have are skipped and counted, and create nothing.
func TestDPRankBeyondDPSize(t *testing.T) {
	h := newHarness(t, 2)
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 2))
	h.put("d1", kvRec("d1", 2, 1, stored(pb.Tier_TIER_DEVICE, nil, []uint64{1}, tokens("X", 0, 0, 4), 4)))
	h.put("d1", &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "d1", DpRank: 9}, SampleTimeUnixNano: 1})
	h.put("d1", &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "d1", DpRank: 1}, SampleTimeUnixNano: 1})
	if a, b := h.invalid(events.TopicKvEvents, reasonDPRank), h.invalid(events.TopicLoad, reasonDPRank); a != 1 || b != 1 {
		t.Fatalf("records_invalid{kv-events,%s} = %v, {load,%[1]s} = %v; want 1 and 1", reasonDPRank, a, b)
	}
	if _, live := h.slotCount(); live != 2 {
		t.Fatalf("%d slots, want 2 (ranks 0 and 1)", live)
	}
	// A smaller dp_size purges the ranks it drops.
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 1))
	if _, live := h.slotCount(); live != 1 {
		t.Fatalf("%d slots after dp_size 2 → 1, want 1", live)
	}
	want := h.digest()
	if got := replayDigest(t, h.log, rand.New(rand.NewPCG(5, 7)), h.opts); got.Hash != want.Hash {
		t.Fatalf("replay digest %s, store %s", got, want)
	}
}

// TestWorkerCap: registrations of new ids beyond MaxWorkers are skipped
// and counted on apply; re-registrations still apply, and a tombstone
// makes room.
func TestWorkerCap(t *testing.T) {
	h := newHarnessWith(t, 2, Options{MaxWorkers: 3})
	for i := 0; i < 5; i++ {
		id := fmt.Sprintf("w%d", i)
		h.put(id, registration(id, pb.Pool_POOL_DECODE, 4, 1))
	}
	h.put("w0", registration("w0", pb.Pool_POOL_DECODE, 8, 1))
	if n := h.invalid(events.TopicWorkers, reasonTooManyWorkers); n != 2 {
		t.Fatalf("records_invalid{workers,too_many_workers} = %v, want 2", n)
	}
	if n := h.counter(rejects.MetricName, map[string]string{"entry": "registration", "reason": reasonTooManyWorkers}); n != 2 {
		t.Fatalf("rejected_total{registration,too_many_workers} = %v, want 2", n)
	}
	workers := func() string {
		var out []string
		h.s.Read(func(v View) {
			for _, w := range v.Workers() {
				out = append(out, fmt.Sprintf("%s/%d", w.ID, w.BlockSize))
			}
		})
		return fmt.Sprint(out)
	}
	if got := workers(); got != "[w0/8 w1/4 w2/4]" {
		t.Fatalf("workers %s, want [w0/8 w1/4 w2/4]", got)
	}
	h.put("w1", nil)
	h.put("w4", registration("w4", pb.Pool_POOL_DECODE, 4, 1))
	if got := workers(); got != "[w0/8 w2/4 w4/4]" {
		t.Fatalf("after a tombstone: workers %s, want [w0/8 w2/4 w4/4]", got)
	}
}

// TestUnknownWorkersBounded: KV events and load samples of ids nobody
// registered hold at most maxUnregisteredSlots slots; beyond that they
// are skipped and counted. Within it they are kept, so a worker whose
// events a replica reads before its registration loses nothing.
func TestUnknownWorkersBounded(t *testing.T) {
	h := newHarness(t, 4)
	h.put("early", kvRec("early", 0, 1, stored(pb.Tier_TIER_DEVICE, nil, []uint64{1}, tokens("X", 0, 0, 4), 4)))
	n := 3 * maxUnregisteredSlots
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("ghost-%d", i)
		if i%2 == 0 {
			h.put(id, kvRec(id, 0, 1, stored(pb.Tier_TIER_DEVICE, nil, []uint64{1}, tokens("X", 0, 0, 4), 4)))
		} else {
			h.put(id, &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: id}, SampleTimeUnixNano: 1})
		}
	}
	if slots, _ := h.slotCount(); slots > maxUnregisteredSlots {
		t.Fatalf("%d records for unregistered ids hold %d slots; want at most %d", n+1, slots, maxUnregisteredSlots)
	}
	skipped := h.invalid(events.TopicKvEvents, reasonUnknownWorker) + h.invalid(events.TopicLoad, reasonUnknownWorker)
	if want := float64(n + 1 - maxUnregisteredSlots); skipped != want {
		t.Fatalf("records_invalid{*,unknown_worker} = %v, want %v", skipped, want)
	}
	h.put("early", registration("early", pb.Pool_POOL_DECODE, 4, 1))
	h.s.Read(func(v View) {
		if ws := v.Workers(); len(ws) != 1 || v.BlocksHeld(0)[0] != 1 {
			t.Fatalf("the early worker's block before its registration was lost: %v", ws)
		}
	})
}

// TestTombstoneFreesSlots: register → store → load → deregister cycles of
// many distinct ids leave the memory and the store bounded.
func TestTombstoneFreesSlots(t *testing.T) {
	h := newHarness(t, 2)
	for i := 0; i < 2000; i++ {
		id := fmt.Sprintf("w%d", i)
		h.put(id, registration(id, pb.Pool_POOL_DECODE, 4, 2))
		h.put(id, kvRec(id, 1, int64(i), stored(pb.Tier_TIER_DEVICE, nil, []uint64{uint64(i)}, tokens(id, 0, 0, 4), 4)))
		h.put(id, &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: id}, SampleTimeUnixNano: int64(i)})
		h.put(id, nil)
	}
	slots, live := h.slotCount()
	if slots > 4 || live != 0 {
		t.Fatalf("after 2000 register/deregister cycles: %d slots allocated, %d live; want at most 4 and 0", slots, live)
	}
	h.s.mu.RLock()
	idx, byID := h.s.st.idx.m.len(), len(h.s.st.byID)
	h.s.mu.RUnlock()
	if idx != 0 || byID != 0 {
		t.Fatalf("hot index %d entries, %d ids with slots; want 0 and 0", idx, byID)
	}
	for k := range dumpKeys(t, h.s) {
		if c := k[1]; c == famPrefix || c == famLoad || c == famHealth || c == famRegistry {
			t.Fatalf("key %s left after every worker was deregistered", k)
		}
	}
}

// TestFutureLoadSampleSkipped: a load sample dated 2096 is skipped (its
// event time is beyond its log time plus the skew bound), so it freezes
// nothing: the worker's next real sample is its load.
func TestFutureLoadSampleSkipped(t *testing.T) {
	h := newHarness(t, 2)
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 1))
	logNow := time.UnixMilli(h.clock)
	future := time.Date(2096, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	used := uint64(999)
	h.apply(h.raw("d1", &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "d1"}, SampleTimeUnixNano: future, KvUsedBlocks: &used}))
	real := uint64(7)
	h.put("d1", &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "d1"}, SampleTimeUnixNano: logNow.UnixNano(), KvUsedBlocks: &real})
	if n := h.invalid(events.TopicLoad, events.ReasonFutureTime); n != 1 {
		t.Fatalf("records_invalid{load,future_timestamp} = %v, want 1", n)
	}
	h.s.Read(func(v View) {
		li, ok := v.LoadInfo(0)
		if !ok || li.Sample.GetKvUsedBlocks() != 7 {
			t.Fatalf("load %+v, want the real sample (kv_used_blocks 7)", li.Sample)
		}
		if v.Now() > logNow.Add(events.MaxEventSkew).UnixNano() {
			t.Fatalf("the event clock moved to %s", time.Unix(0, v.Now()).UTC())
		}
	})
}

// TestDecisionSlotsOfUnknownWorkersFreed: decisions naming worker ids
// nobody registered (a decision names its workers from the record alone)
// hold a slot only while the request is active: thousands of them leave
// memory bounded once they expire.
func TestDecisionSlotsOfUnknownWorkersFreed(t *testing.T) {
	h := newHarnessWith(t, 2, Options{ActiveExpiry: 10 * time.Second})
	for i := 0; i < 2000; i++ {
		id := fmt.Sprintf("ghost-%d", i)
		h.put("d", &pb.DecisionRecord{DecisionId: fmt.Sprintf("d%d", i), RequestId: fmt.Sprintf("r%d", i), Mode: "local",
			DecodeWorker: &pb.WorkerRef{WorkerId: id}, PromptTokens: 8, DecidedAtUnixNano: int64(i) * int64(time.Second)})
	}
	if slots, live := h.slotCount(); live > 100 || slots > 100 {
		t.Fatalf("2000 decisions on unregistered workers, 10 s expiry, 1 s apart: %d slots allocated, %d live; want at most 100", slots, live)
	}
}
