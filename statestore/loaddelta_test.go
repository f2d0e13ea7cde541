package statestore

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// deltaOf frames one record's load delta, as the API appends it beside the
// record (a delta of one entry).
func deltaOf(m any) *pb.LoadDelta {
	switch v := m.(type) {
	case *pb.DecisionRecord:
		return &pb.LoadDelta{WriterId: "replica-a", Decisions: []*pb.DecisionDelta{DecisionDeltaOf(v)}}
	case *pb.OutcomeEvent:
		return &pb.LoadDelta{WriterId: "replica-a", Lifecycle: []*pb.LifecycleDelta{LifecycleDeltaOf(v)}}
	}
	panic(fmt.Sprintf("no delta for %T", m))
}

// cutChains shortens the decisions' prompts to at most n blocks, so that
// their deltas carry their whole chains.
func cutChains(ds []*pb.DecisionRecord, n int) {
	for _, d := range ds {
		c := d.GetChains()[0]
		if len(c.BlockHashes) > n {
			c.BlockHashes = c.BlockHashes[:n]
			d.PromptTokens = uint32(n*16 + 7)
			d.EffectiveIsl = d.PromptTokens / 2
		}
	}
}

// TestLoadDeltaStateMatchesDecisions: a store that learns the decisions and
// lifecycle events of a log from their load deltas holds the load a store
// applying the whole records holds: per worker the same active requests and
// prefill tokens, the same latency model, and, while chains fit the delta's
// bound, the same active blocks and active-prefix matches; past the bound
// the blocks cut count without their hashes (never fewer). The same after
// the delta store is reopened, its chains read back from load-deltas.
func TestLoadDeltaStateMatchesDecisions(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  int // 0: prompts of 64 to 2,048 blocks
	}{{"chains within the bound", events.MaxDeltaHashes}, {"chains past the bound", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			whole, delta := perfHarness(t), perfHarnessWith(t, Options{Source: SourceLoadDeltas})
			ds := perfDecisions(300, 7, 1e18)
			withLatencyFeatures(ds, rand.New(rand.NewPCG(7, 5)))
			if tc.cut > 0 {
				cutChains(ds, tc.cut)
			}
			var wr, dr []*kgo.Record
			for i, d := range ds {
				key := d.GetDecodeWorker().GetWorkerId()
				wr = append(wr, whole.record(key, d))
				dr = append(dr, delta.record(key, deltaOf(d)))
				switch i % 4 {
				case 0:
					o := completedOutcome(d, i)
					wr = append(wr, whole.record(key, o))
					dr = append(dr, delta.record(key, deltaOf(o)))
				case 1:
					o := &pb.OutcomeEvent{RequestId: d.GetRequestId(), DecisionId: d.GetDecisionId(), DecodeWorker: d.GetDecodeWorker(),
						Kind: pb.OutcomeEvent_KIND_PREFILL_DONE, EventTimeUnixNano: d.GetDecidedAtUnixNano() + 5e5}
					wr = append(wr, whole.record(key, o))
					dr = append(dr, delta.record(key, deltaOf(o)))
				}
			}
			for lo := 0; lo < len(wr); lo += 64 {
				whole.apply(wr[lo:min(lo+64, len(wr))]...)
			}
			for lo := 0; lo < len(dr); lo += 50 {
				delta.apply(dr[lo:min(lo+50, len(dr))]...)
			}
			exact := tc.cut > 0
			compareLoad(t, whole.s, delta.s, ds, exact)
			delta.reopen()
			compareLoad(t, whole.s, delta.s, ds, exact)
			if off := delta.s.Offsets(); len(off) == 0 || off[0].Topic == events.TopicDecisions {
				t.Fatalf("the delta store's offsets: %s", off)
			}
			for _, o := range delta.s.Offsets() {
				if !SourceLoadDeltas.Applies(o.Topic) {
					t.Fatalf("the delta store applied %s", o.Topic)
				}
			}
		})
	}
}

// compareLoad compares what two stores hold of the decisions ds.
func compareLoad(t *testing.T, whole, delta *Store, ds []*pb.DecisionRecord, exact bool) {
	t.Helper()
	whole.Read(func(wv View) {
		delta.Read(func(dv View) {
			wf, df := wv.LatencyFit(), dv.LatencyFit()
			if wf == nil || df == nil || *wf != *df {
				t.Fatalf("latency fits differ: %+v from the records, %+v from the deltas", wf, df)
			}
			if wf.Samples[decider.PathLocal][decider.TargetITL] == 0 || wf.Samples[decider.PathRemote][decider.TargetTTFT] == 0 {
				t.Fatalf("the fit has no samples on a path: %v", wf.Samples)
			}
			busy, cut := 0, 0
			for ref, w := range wv.Workers() {
				if dv.Workers()[ref].ID != w.ID {
					t.Fatalf("worker %d is %s in one store and %s in the other", ref, w.ID, dv.Workers()[ref].ID)
				}
				a, b := wv.Active(ref), dv.Active(ref)
				if a.Requests != b.Requests || a.PrefillTokens != b.PrefillTokens {
					t.Errorf("%s: active load %+v from the records, %+v from the deltas", w.ID, a, b)
				}
				switch {
				case exact && a.DecodeBlocks != b.DecodeBlocks:
					t.Errorf("%s: %d active blocks from the records, %d from the deltas", w.ID, a.DecodeBlocks, b.DecodeBlocks)
				case b.DecodeBlocks < a.DecodeBlocks:
					t.Errorf("%s: %d active blocks from the deltas, fewer than the records' %d", w.ID, b.DecodeBlocks, a.DecodeBlocks)
				case b.DecodeBlocks > a.DecodeBlocks:
					cut++
				}
				if a.PrefillTokens > 0 {
					busy++
				}
			}
			if busy == 0 || len(wv.Workers()) == 0 {
				t.Fatal("no worker carries prefill tokens: the comparison shows nothing")
			}
			if !exact && cut == 0 {
				t.Log("no worker counts a cut chain's shared blocks twice")
			}
			wm, dm := make([]int, len(wv.Workers())), make([]int, len(dv.Workers()))
			matched := 0
			for _, d := range ds[:50] {
				chain := d.GetChains()[0].GetBlockHashes()
				clear(wm)
				clear(dm)
				wv.MatchActive(16, chain, wm)
				dv.MatchActive(16, chain, dm)
				for i := range wm {
					want := wm[i]
					if !exact {
						want = min(want, events.MaxDeltaHashes)
					}
					if dm[i] != want {
						t.Fatalf("decision %s: worker %d matches %d active blocks from the records, %d from the deltas", d.GetDecisionId(), i, wm[i], dm[i])
					}
					if dm[i] > 0 {
						matched++
					}
				}
			}
			if matched == 0 {
				t.Fatal("no prompt matched an active request: the comparison shows nothing")
			}
		})
	})
	for _, d := range ds[:20] {
		w, ok1 := whole.DecisionRefForRequest(d.GetRequestId())
		r, ok2 := delta.DecisionRefForRequest(d.GetRequestId())
		if !ok1 || !ok2 || w.DecisionID != r.DecisionID || w.DecodeWorker.GetWorkerId() != r.DecodeWorker.GetWorkerId() ||
			w.PrefillWorker.GetWorkerId() != r.PrefillWorker.GetWorkerId() {
			t.Fatalf("request %s: %+v from the records, %+v from the deltas", d.GetRequestId(), w, r)
		}
		sd, ok := delta.Decision(d.GetDecisionId())
		if !ok || sd.Complete || sd.Partition != -1 || sd.Record.GetDecodeWorker().GetWorkerId() != d.GetDecodeWorker().GetWorkerId() ||
			sd.Record.GetDecidedAtUnixNano() != d.GetDecidedAtUnixNano() {
			t.Fatalf("decision %s from a delta: %+v, %v; want its header with no position on decisions", d.GetDecisionId(), sd, ok)
		}
	}
}

// TestHostileLoadDeltasAreSkipped: load deltas a hostile or buggy writer
// puts on the log (malformed bytes, past the size bound, an entry keyed to
// another worker, too many hashes, a future time) are refused whole,
// counted by reason, and skipped with their offsets advanced, so none of
// them stops the store or a replay; a good delta after them applies. A
// delta on a store of the decisions source changes nothing, not even its
// offsets.
func TestHostileLoadDeltasAreSkipped(t *testing.T) {
	h := perfHarnessWith(t, Options{Source: SourceLoadDeltas})
	ds := perfDecisions(2, 3, 1e18)
	cutChains(ds, 8)
	good := deltaOf(ds[0])
	key := ds[0].GetDecodeWorker().GetWorkerId()
	frame := func(v []byte) *kgo.Record {
		r := &kgo.Record{Topic: string(events.TopicLoadDeltas), Key: []byte(key), Value: v,
			Headers: []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte("pdrouter.events.v1.LoadDelta")}}}
		return h.place(events.TopicLoadDeltas, r)
	}
	mutate := func(f func(d *pb.LoadDelta)) *kgo.Record {
		d := proto.Clone(good).(*pb.LoadDelta)
		f(d)
		return h.raw(key, d)
	}
	cases := []struct {
		rec    *kgo.Record
		reason string
	}{
		{frame([]byte{0x12, 0xff, 0xff, 0xff, 0xff, 0x0f}), events.ReasonDeltaMalformed},
		{frame(make([]byte, events.MaxDeltaBytes+1)), events.ReasonDeltaTooLarge},
		{mutate(func(d *pb.LoadDelta) { d.Decisions[0].DecodeWorker = &pb.WorkerRef{WorkerId: "decode-999"} }), events.ReasonDeltaKeyMismatch},
		{mutate(func(d *pb.LoadDelta) {
			d.Decisions[0].ActiveHashes = make([]uint64, events.MaxDeltaHashes+1)
			d.Decisions[0].PromptTokens = 1 << 20
		}), events.ReasonDeltaTooManyHashes},
		{mutate(func(d *pb.LoadDelta) { d.Decisions[0].DecidedAtUnixNano = math.MaxInt64 }), events.ReasonDeltaEventTime},
		{mutate(func(d *pb.LoadDelta) { d.Decisions, d.Lifecycle = nil, nil }), events.ReasonDeltaEmpty},
	}
	for _, c := range cases {
		h.apply(c.rec)
		if n := h.invalid(events.TopicLoadDeltas, c.reason); n != 1 {
			t.Errorf("records_invalid{load-deltas,%s} = %v, want 1", c.reason, n)
		}
	}
	h.apply(h.record(key, good))
	ref := -1
	h.s.Read(func(v View) {
		for i, w := range v.Workers() {
			if w.ID == key {
				ref = i
				if a := v.Active(decider.WorkerRef(i)); a.Requests != 1 {
					t.Errorf("after the hostile deltas, the good one gives %+v", a)
				}
			}
		}
	})
	if ref < 0 {
		t.Fatalf("worker %s is not registered", key)
	}
	last := h.log[len(h.log)-1]
	if next, _ := h.s.Offsets().Get(events.TopicLoadDeltas, last.Partition); next != last.Offset+1 {
		t.Fatalf("load-deltas/%d at %d after the record at %d", last.Partition, next, last.Offset)
	}
	// A replay of the whole log, hostile records included, reaches the
	// same state.
	if a, b := h.digest(), replayDigest(t, h.log, rand.New(rand.NewPCG(1, 2)), Options{Source: SourceLoadDeltas}); a.Hash != b.Hash {
		t.Fatalf("replay: %s, live: %s", b, a)
	}

	// The other source ignores deltas.
	w := perfHarness(t)
	before := w.digest()
	w.apply(w.record(key, good))
	if after := w.digest(); after.Hash != before.Hash || len(w.s.Offsets()) != len(before.Offsets) {
		t.Fatalf("a decisions store applied a load delta: %s, then %s", before, after)
	}
}

// BenchmarkApplyLoadDeltas: what a peer of source load-deltas spends to
// apply one decision and its completion, by how many entries a record
// holds (a group commit's for one worker) and how long a chain a decision
// carries, with the group's requests held in memory (--peer-requests memory)
// or as facts in Pebble. cpu-ns/op is process CPU per record (a decision's, or its
// completion's), Pebble's memtable flushes included but not the
// compactions the flushed tables owe afterwards; ns/decision is wall time
// per decision and completion.
//
//	go test ./statestore -run '^$' -bench ApplyLoadDeltas -benchtime 20000x -count 3
func BenchmarkApplyLoadDeltas(b *testing.B) {
	for _, layout := range []string{"memory", "pebble"} {
		for _, per := range []int{1, 8} {
			for _, hashes := range []int{0, 32, events.MaxDeltaHashes} {
				b.Run(fmt.Sprintf("requests=%s/entries=%d/hashes=%d", layout, per, hashes), func(b *testing.B) {
					h := perfHarnessWith(b, Options{Source: SourceLoadDeltas, PeerSums: layout == "memory"})
					benchApply(b, h, deltaRecords(h, perfDecisions(b.N, 3, 1e18), per, hashes))
					b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N), "ns/decision")
				})
			}
		}
	}
}

// BenchmarkApplyLoadDeltasHistory: the same for one-entry records of 32
// hashes, on a store that already applied history decisions and their
// completions, all still within their retention: what a peer spends once
// its store holds the group's recent past (every decision's request index
// for --decision-retention, every request's active entry for twice the
// expiry). Measured: no growth in process (8.2, 7.2 and 6.1 µs a record
// at 0, 250,000 and 1,000,000, one run each): what a running peer's
// history costs is in the compactions and collections this benchmark
// does not wait for (docs/scaling.md, "p at a steady size").
//
//	go test ./statestore -run '^$' -bench ApplyLoadDeltasHistory -benchtime 20000x -count 3
func BenchmarkApplyLoadDeltasHistory(b *testing.B) {
	const chunk = 50_000
	for _, history := range []int{0, 250_000, 1_000_000} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			h := perfHarnessWith(b, Options{Source: SourceLoadDeltas})
			// Built and applied a chunk at a time: a million decision
			// records with their tables would not fit in memory at once.
			for lo := 0; lo < history; lo += chunk {
				recs := deltaRecords(h, perfDecisions(min(chunk, history-lo), uint64(100+lo/chunk), 1e18+int64(lo)*1000), 1, 32)
				for i := 0; i < len(recs); i += 64 {
					if err := h.s.Apply(recs[i:min(i+64, len(recs))]); err != nil {
						b.Fatal(err)
					}
				}
			}
			// The measured decisions come after the history in event time.
			benchApply(b, h, deltaRecords(h, perfDecisions(b.N, 3, 1e18+int64(history)*1000), 1, 32))
		})
	}
}

// BenchmarkApplyLoadDeltasHeld: one-entry records of 32 hashes applied by a
// peer that holds the group's requests in memory (PeerSums), after 300,000
// decisions 250 µs apart in event time (4,000 a second for 75 s), by
// IdempotencyWindow: at 30 s it holds the last 30 s of them, at 10 minutes
// all 300,000. What a request held costs a peer once decided must not grow
// with how many are held: the open requests' checkpoint, every 5 s of
// event time, writes the requests opened before its base and not written
// yet, found without visiting the others (opencheckpoint.go).
//
//	go test ./statestore -run '^$' -bench ApplyLoadDeltasHeld -benchtime 50000x -count 2
func BenchmarkApplyLoadDeltasHeld(b *testing.B) {
	const history, chunk, spacing = 300_000, 25_000, int64(250 * time.Microsecond)
	// decisions returns n decisions from the i-th on, spacing apart; made a
	// chunk at a time, since a decision record with its table is ~30 KB.
	decisions := func(n, i int) []*pb.DecisionRecord {
		ds := perfDecisions(n, uint64(100+i), 0)
		for j, d := range ds {
			d.DecidedAtUnixNano = 1e18 + int64(i+j)*spacing
		}
		return ds
	}
	for _, w := range []time.Duration{30 * time.Second, 10 * time.Minute} {
		b.Run(fmt.Sprintf("window=%s", w), func(b *testing.B) {
			h := perfHarnessWith(b, Options{Source: SourceLoadDeltas, PeerSums: true, IdempotencyWindow: w})
			for lo := 0; lo < history; lo += chunk {
				recs := deltaRecords(h, decisions(chunk, lo), 1, 32)
				for i := 0; i < len(recs); i += 64 {
					if err := h.s.Apply(recs[i:min(i+64, len(recs))]); err != nil {
						b.Fatal(err)
					}
				}
			}
			benchApply(b, h, deltaRecords(h, decisions(b.N, history), 1, 32))
			b.ReportMetric(float64(len(h.s.st.act.entries)), "held")
		})
	}
}

// deltaRecords returns the load-delta records of ds and their completions,
// per entries a record and each chain cut to hashes, interleaved as on the
// log: a request ends while later ones are decided.
func deltaRecords(h *harness, ds []*pb.DecisionRecord, per, hashes int) []*kgo.Record {
	var decs, outs []*kgo.Record
	for lo := 0; lo < len(ds); lo += per {
		group := ds[lo:min(lo+per, len(ds))]
		dd, ld := &pb.LoadDelta{WriterId: "replica-a"}, &pb.LoadDelta{WriterId: "replica-a"}
		w := group[0].GetDecodeWorker()
		for i, d := range group {
			d.DecodeWorker = w
			e := DecisionDeltaOf(d)
			e.ActiveHashes = e.ActiveHashes[:min(len(e.ActiveHashes), hashes)]
			dd.Decisions = append(dd.Decisions, e)
			ld.Lifecycle = append(ld.Lifecycle, LifecycleDeltaOf(completedOutcome(d, lo+i)))
		}
		decs = append(decs, h.record(w.GetWorkerId(), dd))
		outs = append(outs, h.record(w.GetWorkerId(), ld))
	}
	var recs []*kgo.Record
	for i := range decs {
		recs = append(recs, decs[i])
		if i >= 16 {
			recs = append(recs, outs[i-16])
		}
	}
	return append(recs, outs[max(len(decs)-16, 0):]...)
}

// TestOpenOtherSource: a store that applied decisions is refused as a
// store of source load-deltas (ErrWrongSource), unless the caller asks for
// a rebuild, which wipes it: the replay then starts from nothing.
func TestOpenOtherSource(t *testing.T) {
	h := perfHarness(t)
	ds := perfDecisions(3, 5, 1e18)
	for _, d := range ds {
		h.put(d.GetDecodeWorker().GetWorkerId(), d)
	}
	if _, ok := h.s.Offsets().Get(events.TopicDecisions, h.log[len(h.log)-1].Partition); !ok {
		t.Fatal("the decisions store applied no decision")
	}
	if err := h.s.Close(); err != nil {
		t.Fatal(err)
	}
	h.s = nil
	if _, err := Open(h.dir, Options{Source: SourceLoadDeltas}); !errors.Is(err, ErrWrongSource) {
		t.Fatalf("opened a decisions store as a load-deltas one: %v", err)
	}
	s, err := Open(h.dir, Options{Source: SourceLoadDeltas, RebuildOtherSource: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if off := s.Offsets(); len(off) != 0 {
		t.Fatalf("the rebuilt store kept offsets %s", off)
	}
	if _, ok := s.Decision(ds[0].GetDecisionId()); ok {
		t.Fatal("the rebuilt store still serves a decision of the wiped one")
	}
}

// TestOwnDecisionAfterItsDeltaAndCompletion: with source load-deltas, the
// deciding replica may record its own decision after its delta and even
// its completion's delta were applied (the broker serves an append to the
// materializer as it acknowledges it). Given the delta's position, the
// store knows the decision was applied and counts nothing more: the load
// of a request that ended must not come back as a local decision.
func TestOwnDecisionAfterItsDeltaAndCompletion(t *testing.T) {
	h := perfHarnessWith(t, Options{Source: SourceLoadDeltas})
	d := perfDecisions(1, 9, 1e18)[0]
	key := d.GetDecodeWorker().GetWorkerId()
	dec := h.record(key, d) // the decision's own record, never applied here
	delta := h.record(key, deltaOf(d))
	h.apply(delta, h.record(key, deltaOf(completedOutcome(d, 1))))
	if err := h.s.RecordLocalDecisionWithDelta(d, dec.Value, dec.Partition, dec.Offset, delta.Partition, delta.Offset); err != nil {
		t.Fatal(err)
	}
	h.s.Read(func(v View) {
		for ref, w := range v.Workers() {
			if a := v.Active(decider.WorkerRef(ref)); a.Requests != 0 || a.DecodeBlocks != 0 || a.PrefillTokens != 0 {
				t.Errorf("%s carries %+v after its one request completed", w.ID, a)
			}
		}
	})
	// Its position is still known, so it is served whole from the log.
	if sd, ok := h.s.Decision(d.GetDecisionId()); !ok || sd.Partition != dec.Partition || sd.Offset != dec.Offset {
		t.Fatalf("own decision served at %d/%d (complete %v), %v; want its position %d/%d", sd.Partition, sd.Offset, sd.Complete, ok, dec.Partition, dec.Offset)
	}
}
