package statestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
	"github.com/pdrouter/pdrouter/internal/testsize"
)

// The new state (decision records and their retention sweep, approximate
// mode's predictions, KV-event health) keeps invariants 1 and 3: the same
// log in other interleavings and batchings, after a restart, and replayed
// into a new store gives one digest, and in approximate mode the same
// overlaps (predictions are memory derived from the stored records).
func TestDigestIndependentOfPartitionOrderWithOptions(t *testing.T) {
	// Long and self-contained: it runs at the same time as the
	// package's other long tests.
	t.Parallel()
	for _, tc := range []struct {
		name string
		o    Options
	}{
		// The generator's clock moves ~1 s per record: retention and TTL
		// end many times in a run.
		{"decision_retention_20s", Options{DecisionRetention: 20 * time.Second}},
		{"approximate_ttl_30s", Options{Approximate: true, ApproximateTTL: 30 * time.Second, DecisionRetention: 45 * time.Second}},
		{"approximate_ttl_600s", Options{Approximate: true, ApproximateTTL: 600 * time.Second, KvEventsMissingAfter: 5 * time.Second}},
	} {
		for seed := uint64(1); seed <= uint64(testsize.Cases(2, 1)); seed++ {
			t.Run(fmt.Sprintf("%s/%d", tc.name, seed), func(t *testing.T) {
				h := digestIndependentOfPartitionOrderWith(t, seed, tc.o)
				stored, total := 0, 0
				for k := range dumpKeys(t, h.s) {
					if strings.HasPrefix(k, `"d`) {
						stored++
					}
				}
				for _, r := range h.log {
					if tp, _ := (events.Names{}).Logical(r.Topic); tp == events.TopicDecisions {
						total++
					}
				}
				if tc.o.DecisionRetention > 0 && (stored == 0 || stored >= total) {
					t.Fatalf("%d of %d decisions stored: the retention sweep is not exercised", stored, total)
				}
				if !tc.o.Approximate {
					return
				}
				want := matchAnswers(h.s)
				if !strings.Contains(strings.Join(want, "\n"), "device=") {
					t.Fatal("no answers")
				}
				for seed := uint64(1); seed <= 2; seed++ {
					r := replayStore(t, h.log, rand.New(rand.NewPCG(seed, 5)), h.opts)
					if got := matchAnswers(r); strings.Join(got, "\n") != strings.Join(want, "\n") {
						t.Fatalf("replay %d answers differently:\n%s\nwant:\n%s", seed, strings.Join(got, "\n"), strings.Join(want, "\n"))
					}
					_ = r.Close()
				}
				h.reopen()
				if got := matchAnswers(h.s); strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("after reopen:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			})
		}
	}
}

// matchAnswers is MatchPrefix for every text of the generator.
func matchAnswers(s *Store) []string {
	var out []string
	for _, bs := range []int{4, 8} {
		for i := 0; i < 6; i++ {
			chain := chainOf(fmt.Sprintf("T%d", i), 12, bs)
			s.Read(func(v View) {
				ws := v.Workers()
				dst := make([]decider.TierOverlap, len(ws))
				v.MatchPrefix(bs, chain, dst)
				for j, w := range ws {
					if w.BlockSize == bs {
						out = append(out, fmt.Sprintf("T%d %s device=%d host=%d disk=%d", i, w.ID, dst[j].Device, dst[j].Host, dst[j].Disk))
					}
				}
			})
		}
	}
	return out
}

// Approximate mode predicts during a generated run (the test above would
// pass vacuously otherwise), and predicts nothing when off.
func TestApproximatePredicts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      Options
		expect bool
	}{
		{"on", Options{Approximate: true}, true},
		{"off", Options{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessWith(t, 2, tc.o)
			seen := int64(0)
			recs := genRecords(h, 4, 1500, 8)
			for len(recs) > 0 {
				n := min(100, len(recs))
				h.apply(recs[:n]...)
				recs = recs[n:]
				seen = max(seen, h.s.PredictedEntries())
			}
			if (seen > 0) != tc.expect {
				t.Fatalf("max predicted entries %d, want predictions: %v", seen, tc.expect)
			}
		})
	}
}

func decision(id, req, worker string, at int64) *pb.DecisionRecord {
	ref := &pb.WorkerRef{WorkerId: worker}
	return &pb.DecisionRecord{DecisionId: id, RequestId: req, Mode: "local", DecodeWorker: ref, DecidedAtUnixNano: at,
		PromptTokens: 8, BlockSize: 4, Chains: []*pb.HashChain{{BlockSize: 4, BlockHashes: chainOf("W", 1, 4)}}}
}

func TestWaitApplied(t *testing.T) {
	h := newHarness(t, 1)
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 0)) // workers/0 = 1
	for _, tc := range []struct {
		name    string
		want    Offsets
		later   int // records applied after the wait starts (workers/0)
		timeout time.Duration
		err     string // "" for success
	}{
		{"already_reached", Offsets{{events.TopicWorkers, 0, 1}}, 0, time.Second, ""},
		{"zero_of_unseen_partition", Offsets{{events.TopicLoad, 0, 0}}, 0, time.Second, ""},
		{"reached_by_later_apply", Offsets{{events.TopicWorkers, 0, 3}}, 2, 10 * time.Second, ""},
		{"not_reached", Offsets{{events.TopicWorkers, 0, 3}, {events.TopicLoad, 2, 1}}, 0, 50 * time.Millisecond,
			"workers/0 applied 3 < want 4, load/2 applied 0 < want 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err != "" {
				tc.want[0].Next = h.s.Offsets()[0].Next + 1
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			var wg sync.WaitGroup
			if tc.later > 0 {
				var recs []*kgo.Record
				for i := 0; i < tc.later; i++ {
					recs = append(recs, h.record("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 0)))
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(20 * time.Millisecond)
					for _, r := range recs { // one Apply each: the waiter wakes twice
						h.apply(r)
					}
				}()
			}
			start := time.Now()
			err := h.s.WaitApplied(ctx, tc.want)
			wg.Wait()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("WaitApplied: %v", err)
			case tc.err != "" && (err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("WaitApplied: %v, want DeadlineExceeded naming %q", err, tc.err)
			case tc.err == "" && time.Since(start) > tc.timeout/2:
				t.Fatalf("took %s: not woken by the apply", time.Since(start))
			}
		})
	}
}

// A reader that waited for a decision's offset finds the decision, even
// though readers see applied chunks before Pebble commits the batch: the
// hook holds the commit while the test reads.
func TestDecisionVisibleOnceApplied(t *testing.T) {
	h := newHarnessWith(t, 1, Options{ChunkRecords: 1})
	d := decision("x1", "q1", "d1", 1e12)
	recs := []*kgo.Record{h.record("d1", d)}
	for i := 0; i < 5; i++ {
		recs = append(recs, h.record("d1", &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "d1"}, SampleTimeUnixNano: 1e12}))
	}
	checked := make(chan error, 1)
	testHookBeforeCommit = func() {
		if _, ok := h.s.Decision("x1"); !ok {
			checked <- errors.New("Decision: not found before the commit")
		} else if got, ok := h.s.DecisionForRequest("q1"); !ok || got.Record.GetDecisionId() != "x1" {
			checked <- errors.New("DecisionForRequest: not found before the commit")
		} else {
			checked <- nil
		}
	}
	defer func() { testHookBeforeCommit = nil }()
	h.apply(recs...)
	if err := <-checked; err != nil {
		t.Fatal(err)
	}
	testHookBeforeCommit = nil
	if _, ok := h.s.Decision("x1"); !ok {
		t.Fatal("not found after the commit")
	}
}

// Memory stays bounded: this replica's unconfirmed decisions by
// MaxLocalDecisions (oldest out), the records cache by DecisionCacheSize.
func TestDecisionMemoryBounded(t *testing.T) {
	h := newHarnessWith(t, 1, Options{MaxLocalDecisions: 10, DecisionCacheSize: 8})
	for i := 0; i < 100; i++ {
		if err := h.s.RecordLocalDecision(decision(fmt.Sprintf("l%03d", i), fmt.Sprintf("q%03d", i), "d1", 1e12)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		id   string
		want bool
	}{{"l000", false}, {"l089", false}, {"l090", true}, {"l099", true}} {
		if _, ok := h.s.Decision(tc.id); ok != tc.want {
			t.Errorf("Decision(%s) = %v, want %v", tc.id, ok, tc.want)
		}
	}
	h.put("clock", &pb.OutcomeEvent{RequestId: "tick", Kind: pb.OutcomeEvent_KIND_CANCELLED, EventTimeUnixNano: 1e12})
	if n, q := len(h.s.st.dec.local), len(h.s.st.dec.localQ); n != 10 || q > 10+64 {
		t.Fatalf("local decisions %d (queue %d), want 10", n, q)
	}
	// Read back from the log: they leave the local set, Pebble serves them.
	for i := 0; i < 100; i++ {
		h.put("d1", decision(fmt.Sprintf("l%03d", i), fmt.Sprintf("q%03d", i), "d1", 1e12))
	}
	if n := len(h.s.st.dec.local); n != 0 {
		t.Fatalf("%d local decisions left after read-back", n)
	}
	for i := 0; i < 100; i++ {
		if _, ok := h.s.Decision(fmt.Sprintf("l%03d", i)); !ok {
			t.Fatalf("l%03d not found after read-back", i)
		}
	}
	if n := h.s.cache.ll.Len(); n != 8 || len(h.s.cache.m) != 8 {
		t.Fatalf("cache holds %d records, want 8", n)
	}
}

// A decision applied from the log is in the records cache once its batch
// committed, before any lookup: a lifecycle event right after it does not
// read it back from Pebble. The cache stays bounded and keeps the newest.
func TestCommittedDecisionsAreCached(t *testing.T) {
	h := newHarnessWith(t, 1, Options{DecisionCacheSize: 4})
	for i := 0; i < 6; i++ {
		h.put("d1", decision(fmt.Sprintf("c%d", i), fmt.Sprintf("q%d", i), "d1", 1e12+int64(i)))
	}
	for i := 0; i < 6; i++ {
		id := fmt.Sprintf("c%d", i)
		if _, got := h.s.cache.get(id); got != (i >= 2) {
			want := i >= 2
			t.Errorf("%s cached: %v, want %v", id, got, want)
		}
	}
	if n := h.s.cache.ll.Len(); n != 4 {
		t.Fatalf("cache holds %d records, want 4", n)
	}
}

// The warning is logged once when a worker enters "KV events missing", not
// on every apply; leaving and entering again logs again.
func TestKvEventsMissingLogsOncePerTransition(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	h := newHarnessWith(t, 2, Options{KvEventsMissingAfter: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 0))
	load := func(at int64) {
		h.put("d1", &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "d1"}, SampleTimeUnixNano: at * 1e9})
	}
	count := func() (warn, info int) {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(buf.String(), "KV events missing"), strings.Count(buf.String(), "no longer missing")
	}
	for at := int64(100); at <= 200; at++ {
		load(at)
	}
	if w, i := count(); w != 1 || i != 0 {
		t.Fatalf("after 100 s of load: %d warnings, %d notes; want 1, 0", w, i)
	}
	h.put("d1", kvRec("d1", 0, 200*1e9, stored(pb.Tier_TIER_DEVICE, nil, []uint64{1}, tokens("X", 0, 0, 4), 4)))
	if w, i := count(); w != 1 || i != 1 {
		t.Fatalf("after a KV event: %d warnings, %d notes; want 1, 1", w, i)
	}
	for at := int64(201); at <= 260; at++ {
		load(at)
	}
	if w, _ := count(); w != 2 {
		t.Fatalf("after 60 s more of load: %d warnings, want 2", w)
	}
	h.reopen() // a new process: flagged workers are logged once at Open
	if w, _ := count(); w != 3 {
		t.Fatalf("after reopen: %d warnings, want 3", w)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Registration returns the latest registration of the worker, for each
// rank of a data-parallel worker that sent something, and false once it is
// deregistered.
func TestRegistration(t *testing.T) {
	h := newHarness(t, 2)
	r1 := registration("d1", pb.Pool_POOL_DECODE, 4, 2)
	r1.KvEventsEndpoint = "tcp://a:1"
	h.put("d1", r1)
	r2 := registration("d1", pb.Pool_POOL_DECODE, 4, 2)
	r2.KvEventsEndpoint = "tcp://b:2"
	h.put("d1", r2)
	h.put("d1", &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "d1", DpRank: 1}, SampleTimeUnixNano: 1})
	h.put("p1", registration("p1", pb.Pool_POOL_PREFILL, 4, 0))
	got := map[string]string{}
	h.s.Read(func(v View) {
		for ref, w := range v.Workers() {
			if reg, ok := v.Registration(ref); ok {
				got[w.ID] = reg.GetKvEventsEndpoint()
			}
		}
		if _, ok := v.Registration(decider.WorkerRef(len(v.Workers()))); ok {
			t.Error("a ref out of range has a registration")
		}
	})
	if want := map[string]string{"d1": "tcp://b:2", "d1/dp1": "tcp://b:2", "p1": ""}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("registrations %v, want %v", got, want)
	}
	h.put("d1", nil)
	h.s.Read(func(v View) {
		if n := len(v.Workers()); n != 1 {
			t.Fatalf("%d workers after the tombstone, want 1", n)
		}
	})
}

// TestWatermarkFollowsApply: the watermark decisions record is cached
// between applies; it must still move with every applied record, and equal
// the offsets the state has applied.
func TestWatermarkFollowsApply(t *testing.T) {
	h := newHarness(t, 1)
	read := func() (*pb.Watermark, Offsets) {
		var w *pb.Watermark
		var o Offsets
		h.s.Read(func(v View) { w, o = v.WatermarkProto(), v.Watermark() })
		return w, o
	}
	for i, id := range []string{"decode-1", "decode-2", "prefill-1"} {
		h.put(id, registration(id, pb.Pool_POOL_DECODE, 16, 1))
		w, o := read()
		again, _ := read()
		if !proto.Equal(w, o.Proto()) || again != w {
			t.Fatalf("after %d records: watermark %v, offsets %v (cached %p, again %p)", i+1, w, o, w, again)
		}
		if got := w.GetTopics()[0].GetPartitions()[0].GetOffset(); got != int64(i+1) {
			t.Fatalf("after %d records the watermark says %d", i+1, got)
		}
	}
}

// TestRequestIndexValue: the request index value round-trips a decision's
// time and workers, and a value this version did not write (the v3 8-byte
// form, truncated or with trailing bytes) is refused, never misread.
func TestRequestIndexValue(t *testing.T) {
	remote := &pb.DecisionRecord{DecidedAtUnixNano: -5, DecodeWorker: &pb.WorkerRef{WorkerId: "decode-1", DpRank: 3},
		PrefillWorker: &pb.WorkerRef{WorkerId: "prefill-\x00x", DpRank: 70000}}
	local := &pb.DecisionRecord{DecidedAtUnixNano: 1 << 62, DecodeWorker: &pb.WorkerRef{WorkerId: "d"}}
	for _, d := range []*pb.DecisionRecord{remote, local} {
		v := requestIndexValue(d)
		tD, ref, ok := decodeRequestIndex(v)
		if !ok || tD != d.GetDecidedAtUnixNano() || !proto.Equal(ref.DecodeWorker, d.GetDecodeWorker()) || !proto.Equal(ref.PrefillWorker, d.GetPrefillWorker()) {
			t.Fatalf("round trip of %v: %d %+v %v", d, tD, ref, ok)
		}
		for _, bad := range [][]byte{v[:8], v[:len(v)-1], append(slices.Clone(v), 0), v[:3]} {
			if _, _, ok := decodeRequestIndex(bad); ok {
				t.Fatalf("malformed value %x was accepted", bad)
			}
		}
	}
}

// A committed decision is stored as its header and the record's position
// on the decisions topic, never its candidate table: the stored value stays
// small whatever the fleet, and the position is exactly the record's.
// Approximate mode keeps the chains, and after a reopen rebuilds from them
// the predictions it had.
func TestCommittedDecisionIsHeaderAndPosition(t *testing.T) {
	for _, tc := range []struct {
		name       string
		o          Options
		keepChains bool
	}{
		{"kv-events", Options{DecisionCacheSize: 1}, false},
		{"approximate", Options{DecisionCacheSize: 1, Approximate: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessWith(t, 3, tc.o)
			big := eventstest.Decision(128, 32, 1000)
			big.DecisionId, big.RequestId, big.DecidedAtUnixNano = "big", "q-big", 1e12
			r := h.record(big.GetDecodeWorker().GetWorkerId(), big)
			h.apply(r)
			// Push "big" out of the one-entry cache of committed records.
			h.put("d1", decision("other", "q-other", "d1", 1e12+1))
			predicted := h.s.PredictedEntries()
			if tc.keepChains && predicted == 0 {
				t.Fatal("approximate mode predicted nothing: the reopen check would pass vacuously")
			}

			sd, ok := h.s.Decision("big")
			if !ok || sd.Complete {
				t.Fatalf("Decision(big): found %v, complete %v; want a stored header", ok, sd.Complete)
			}
			if sd.Partition != r.Partition || sd.Offset != r.Offset {
				t.Fatalf("position %d@%d, want the record's %d@%d", sd.Partition, sd.Offset, r.Partition, r.Offset)
			}
			if n := len(sd.Record.GetCandidates()); n != 0 {
				t.Fatalf("the store kept %d candidate rows", n)
			}
			if got := len(sd.Record.GetChains()) > 0; got != tc.keepChains {
				t.Fatalf("chains kept: %v, want %v", got, tc.keepChains)
			}
			if sd.Record.GetMode() != big.GetMode() || sd.Record.GetReason() != big.GetReason() || !proto.Equal(sd.Record.GetWatermark(), big.GetWatermark()) {
				t.Fatal("the header lost fields of the record")
			}
			v, closer, err := h.s.db.Get(decisionKey("big"))
			if err != nil {
				t.Fatal(err)
			}
			size := len(v)
			_ = closer.Close()
			if limit := 2048 + map[bool]int{true: 8 * 1000}[tc.keepChains]; size > limit {
				t.Fatalf("stored value is %d bytes for a %d-byte record; want ≤ %d", size, len(r.Value), limit)
			}
			h.reopen()
			if got := h.s.PredictedEntries(); got != predicted {
				t.Fatalf("predicted entries after reopen: %d, before: %d", got, predicted)
			}
			if sd, ok := h.s.DecisionForRequest("q-big"); !ok || sd.Record.GetDecisionId() != "big" || sd.Offset != r.Offset {
				t.Fatalf("DecisionForRequest after reopen: %+v %v", sd, ok)
			}
		})
	}
}

// A stored decision value that is not what appendStoredDecision wrote (a
// store written by another build, a torn value) is an error naming what is
// wrong, never a record with a made-up position.
func TestDecodeStoredDecisionRejectsMalformedValues(t *testing.T) {
	good, err := appendStoredDecision(nil, 3, 1234, decision("x", "q", "d1", 1e12), false)
	if err != nil {
		t.Fatal(err)
	}
	if sd, err := decodeStoredDecision(good); err != nil || sd.Partition != 3 || sd.Offset != 1234 || sd.Record.GetDecisionId() != "x" || sd.Complete {
		t.Fatalf("the value appendStoredDecision wrote: %+v, %v", sd, err)
	}
	// The same value learnt from a load delta: its position is the delta's,
	// and lookups serve none on the decisions topic.
	if sd, err := decodeStoredDecision(append([]byte{storedDeltaFormat}, good[1:]...)); err != nil || sd.Partition != -1 || sd.Offset != -1 || sd.Record.GetDecisionId() != "x" {
		t.Fatalf("a decision learnt from a delta: %+v, %v", sd, err)
	}
	for _, tc := range []struct {
		name string
		v    []byte
		want string
	}{
		{"empty", nil, "unknown value format"},
		{"other format", append([]byte{3}, good[1:]...), "unknown value format"},
		{"cut in the position", good[:2], "bad position"},
		{"partition past int32", binary.AppendUvarint(binary.AppendUvarint([]byte{1}, 1<<40), 5), "bad position"},
		{"cut in the header", good[:len(good)-2], "stored decision:"},
	} {
		if _, err := decodeStoredDecision(tc.v); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
