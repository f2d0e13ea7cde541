package statestore

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// TestOpenRequestsMatchFacts: a store that holds the log's decisions as
// open requests (Options.PeerSums) holds the load a store applying the
// whole records holds, for a log in partition order: per worker the same
// active requests, prefill tokens and active blocks, the same matches and
// the same latency model.
func TestOpenRequestsMatchFacts(t *testing.T) {
	whole, open := perfHarness(t), perfHarnessWith(t, Options{Source: SourceLoadDeltas, PeerSums: true})
	ds := perfDecisions(300, 7, 1e18)
	withLatencyFeatures(ds, rand.New(rand.NewPCG(7, 5)))
	cutChains(ds, events.MaxDeltaHashes)
	var wr, or []*kgo.Record
	for i, d := range ds {
		key := d.GetDecodeWorker().GetWorkerId()
		wr = append(wr, whole.record(key, d))
		or = append(or, open.record(key, deltaOf(d)))
		var o *pb.OutcomeEvent
		switch i % 4 {
		case 0:
			o = completedOutcome(d, i)
		case 1:
			o = &pb.OutcomeEvent{RequestId: d.GetRequestId(), DecisionId: d.GetDecisionId(), DecodeWorker: d.GetDecodeWorker(),
				Kind: pb.OutcomeEvent_KIND_PREFILL_DONE, EventTimeUnixNano: d.GetDecidedAtUnixNano() + 5e5}
		case 2:
			o = completedOutcome(d, i)
			o.DecisionId = "" // names the request only
		}
		if o != nil {
			wr = append(wr, whole.record(key, o))
			or = append(or, open.record(key, deltaOf(o)))
		}
	}
	for lo := 0; lo < len(wr); lo += 64 {
		whole.apply(wr[lo:min(lo+64, len(wr))]...)
	}
	for lo := 0; lo < len(or); lo += 50 {
		open.apply(or[lo:min(lo+50, len(or))]...)
	}
	compareLoad(t, whole.s, open.s, ds, true)
	open.s.Read(func(View) {
		ended, held := 0, 0
		for _, e := range open.s.st.act.entries {
			if e.flags&fTerminal != 0 {
				ended++
				if e.chain != nil || e.onDecode {
					held++
				}
			}
		}
		if ended == 0 || held > 0 {
			t.Fatalf("%d ended requests, %d of them still carrying blocks", ended, held)
		}
	})
}

// openOptions are the options of the open requests' tests: an expiry
// longer than a checkpoint's replay window, so that requests never ended
// are written to checkpoints, and shorter than the log's 120 seconds, so
// that they are dropped too.
func openOptions() Options {
	return Options{Source: SourceLoadDeltas, PeerSums: true, ActiveExpiry: 75 * time.Second}
}

// openLog makes, on h, the records of n decisions 200 ms apart and their
// lifecycle: a quarter completed, a quarter prefilled then completed by
// request id only, a quarter prefilled only and a quarter never ended
// (both expire), and every 16th decision copied onto another partition.
// Nothing is applied.
func openLog(t *testing.T, h *harness, n int) []*kgo.Record {
	t.Helper()
	ds := perfDecisions(n, 11, 1e18)
	withLatencyFeatures(ds, rand.New(rand.NewPCG(11, 5)))
	cutChains(ds, events.MaxDeltaHashes)
	var recs []*kgo.Record
	for i, d := range ds {
		d.DecidedAtUnixNano = 1e18 + int64(i)*200e6
		key := d.GetDecodeWorker().GetWorkerId()
		r := h.record(key, deltaOf(d))
		recs = append(recs, r)
		if i%16 == 5 {
			recs = append(recs, h.duplicateOnPartition(r, (r.Partition+1)%h.parts))
		}
		prefilled := &pb.OutcomeEvent{RequestId: d.GetRequestId(), DecisionId: d.GetDecisionId(), DecodeWorker: d.GetDecodeWorker(),
			Kind: pb.OutcomeEvent_KIND_PREFILL_DONE, EventTimeUnixNano: d.GetDecidedAtUnixNano() + 5e8}
		switch i % 4 {
		case 0:
			recs = append(recs, h.record(key, deltaOf(completedOutcome(d, i))))
		case 1:
			o := completedOutcome(d, i)
			o.DecisionId = ""
			o.EventTimeUnixNano += 1e9
			recs = append(recs, h.record(key, deltaOf(prefilled)), h.record(key, deltaOf(o)))
		case 2:
			recs = append(recs, h.record(key, deltaOf(prefilled)))
		}
	}
	return recs
}

// applyIn applies recs to s in batches of n.
func applyIn(t *testing.T, s *Store, recs []*kgo.Record, n int) {
	t.Helper()
	for lo := 0; lo < len(recs); lo += n {
		if err := s.Apply(recs[lo:min(lo+n, len(recs))]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpenRequestsRestart: a store of open requests reaches the state of
// one that never stopped, at the same offsets, whether it closed cleanly
// or crashed between two checkpoints (then it reads the load deltas since
// the last checkpoint again, for the open requests only); and a store that
// read the partitions in another order, in other batches, agrees too.
func TestOpenRequestsRestart(t *testing.T) {
	a := perfHarnessWith(t, openOptions())
	recs := openLog(t, a, 600)
	applyIn(t, a.s, recs, 40)
	a.log = append(a.log, recs...)
	want := a.digest()
	var held float64
	a.s.Read(func(View) { held = float64(len(a.s.st.act.entries)) })
	if held == 0 || held >= 600 {
		t.Fatalf("%v requests held at the end: the log should leave some, and drop the rest", held)
	}

	t.Run("clean restart", func(t *testing.T) {
		b := perfHarnessWith(t, openOptions())
		b.log = append(b.log, recs...)
		applyIn(t, b.s, recs[:len(recs)/2], 33)
		b.reopen()
		if got := b.s.Offsets(); !slices.Equal(got, b.s.st.sortedOffsets()) {
			t.Fatalf("a store closed cleanly has load deltas to read again: %v against %v", got, b.s.st.sortedOffsets())
		}
		applyIn(t, b.s, recs[len(recs)/2:], 33)
		if got := b.digest(); got.Hash != want.Hash {
			t.Fatalf("digest after a restart %s, without %s", got, want)
		}
		compareOpen(t, a.s, b.s)
	})

	t.Run("crash", func(t *testing.T) {
		c := perfHarnessWith(t, openOptions())
		c.log = append(c.log, recs...)
		cut := 2 * len(recs) / 3
		applyIn(t, c.s, recs[:cut], 25)
		// On, a record at a time, to a second past the last checkpoint, so
		// that the crash loses what the records since then taught the
		// latency model.
		for ; c.s.st.reqNow-c.s.st.act.open.lastCkpt < int64(time.Second); cut++ {
			applyIn(t, c.s, recs[cut:cut+1], 1)
		}
		learnt := len(c.s.st.lat.IDs())
		x := crashed(t, c, openOptions())
		if restored := len(x.st.act.entries); restored == 0 {
			t.Fatal("the checkpoint holds no request: the test shows only the records read again")
		}
		if restored := len(x.st.lat.IDs()); restored == 0 || restored >= learnt {
			t.Fatalf("the checkpoint holds %d of the %d latency model entries: the test shows nothing of the records read again", restored, learnt)
		}
		again := readAgain(x, recs)
		if len(again) <= len(recs)-cut {
			t.Fatal("no record before the crash to read again: the crash left the checkpoint at the offsets, the test shows nothing")
		}
		if _, err := x.Digest(); !errors.Is(err, errOpenBehind) {
			t.Fatalf("digest of a store whose open requests are behind: %v, want errOpenBehind", err)
		}
		applyIn(t, x, again, 30)
		if n := testutil.ToFloat64(x.met.openReplayed); n == 0 {
			t.Fatal("no record was read again for the open requests")
		}
		got, err := x.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if got.Hash != want.Hash {
			t.Fatalf("digest after a crash %s, without %s", got, want)
		}
		compareOpen(t, a.s, x)
	})

	t.Run("partitions in another order", func(t *testing.T) {
		order := make([]int32, a.parts)
		for i := range order {
			order[i] = a.parts - 1 - int32(i)
		}
		d := applyPartitionsInOrder(t, a.log, order, openOptions(), nil)
		got, err := d.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if got.Hash != want.Hash {
			t.Fatalf("digest with the partitions read in reverse %s, in log order %s", got, want)
		}
		compareOpen(t, a.s, d)
	})
}

// compareOpen compares the load two stores of open requests hold.
func compareOpen(t *testing.T, a, b *Store) {
	t.Helper()
	a.Read(func(av View) {
		b.Read(func(bv View) {
			busy := 0
			for ref, w := range av.Workers() {
				x, y := av.Active(ref), bv.Active(ref)
				if x != y {
					t.Errorf("%s: active load %+v against %+v", w.ID, x, y)
				}
				if x.DecodeBlocks > 0 {
					busy++
				}
			}
			if busy == 0 {
				t.Fatal("no worker carries blocks: the comparison shows nothing")
			}
		})
	})
}

// BenchmarkOpenReplay is what a crash costs a store of open requests: the
// load deltas since its checkpoint read again for the open requests only
// (ns/record). Decisions 0.4 ms apart (2,500 a second), each completed, all
// within the checkpoint's replay window, so the restart reads them all.
//
//	go test ./statestore -run '^$' -bench OpenReplay -benchtime 50000x
func BenchmarkOpenReplay(b *testing.B) {
	o := Options{Source: SourceLoadDeltas, PeerSums: true}
	h := perfHarnessWith(b, o)
	ds := perfDecisions(b.N, 13, 1e18)
	cutChains(ds, 32)
	var recs []*kgo.Record
	for i, d := range ds {
		d.DecidedAtUnixNano = 1e18 + int64(i)*400e3
		key := d.GetDecodeWorker().GetWorkerId()
		recs = append(recs, h.record(key, deltaOf(d)))
		if i >= 64 { // the decision 64 before ends: ~64 requests open
			e := ds[i-64]
			recs = append(recs, h.record(e.GetDecodeWorker().GetWorkerId(), deltaOf(completedOutcome(e, i))))
		}
	}
	h.log = append(h.log, recs...)
	for lo := 0; lo < len(recs); lo += 256 {
		if err := h.s.Apply(recs[lo:min(lo+256, len(recs))]); err != nil {
			b.Fatal(err)
		}
	}
	x := crashed(b, h, o)
	again := readAgain(x, recs)
	b.ResetTimer()
	for lo := 0; lo < len(again); lo += 256 {
		if err := x.Apply(again[lo:min(lo+256, len(again))]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n := testutil.ToFloat64(x.met.openReplayed); n != float64(len(again)) || n == 0 {
		b.Fatalf("%v records read again for the open requests, want %d", n, len(again))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(len(again)), "ns/record")
}

// TestOpenHeapPopsInOrder: the typed heap of open.go pops by time, then
// entry id, whatever the order items were pushed in.
func TestOpenHeapPopsInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	var h openHeap
	var want []openItem
	for i := range 500 {
		it := openItem{at: rng.Int64N(50), e: &reqEntry{id: fmt.Sprintf("d%03d", i)}}
		h.push(it)
		want = append(want, it)
	}
	slices.SortFunc(want, func(a, b openItem) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return strings.Compare(a.e.id, b.e.id)
	})
	for i, w := range want {
		if got := h.pop(); got != w {
			t.Fatalf("pop %d: %d %s, want %d %s", i, got.at, got.e.id, w.at, w.e.id)
		}
	}
	if len(h) != 0 {
		t.Fatalf("%d items left", len(h))
	}
}

// crashed opens, with o, what a crash of h's store would leave with the WAL
// off (its flushed batches), reading chains back from h's log. It closes
// when the test ends.
func crashed(tb testing.TB, h *harness, o Options) *Store {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "crashed")
	if err := h.s.db.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := h.s.db.Checkpoint(dir); err != nil {
		tb.Fatal(err)
	}
	o.Records = harnessLog{h}
	x, err := Open(dir, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = x.Close() })
	return x
}

// readAgain returns the load-delta records of recs at or past where s
// resumes: what its materializer would read again.
func readAgain(s *Store, recs []*kgo.Record) []*kgo.Record {
	from := map[int32]int64{}
	for _, p := range s.Offsets() {
		if p.Topic == events.TopicLoadDeltas {
			from[p.Partition] = p.Next
		}
	}
	var again []*kgo.Record
	for _, r := range recs {
		if r.Offset >= from[r.Partition] {
			again = append(again, r)
		}
	}
	return again
}

// TestCheckpointHoldsEveryRequestBeforeItsBase: after every checkpoint,
// each request held that was opened before the checkpoint's base has its
// key in Pebble as it is in memory, whether it was never written before or
// changed after an earlier checkpoint wrote it, and every key is a request
// held. The checkpoint finds them without visiting every request held
// (opencheckpoint.go); this is what it must still write.
func TestCheckpointHoldsEveryRequestBeforeItsBase(t *testing.T) {
	h := perfHarnessWith(t, openOptions())
	recs := openLog(t, h, 1200)
	st := h.s.st
	f := st.act.open
	checked := 0
	check := func() {
		t.Helper()
		for id, e := range st.act.entries {
			if e.offset >= f.ckptNext[e.partition] {
				continue
			}
			got, closer, err := h.s.db.Get(openEntryKey(id))
			if err != nil {
				t.Fatalf("request %q, opened before the checkpoint's base, has no key: %v", id, err)
			}
			if want := encodeOpen(nil, e); string(got) != string(want) {
				t.Fatalf("request %q: its key holds %x, the request is %x", id, got, want)
			}
			_ = closer.Close()
			checked++
		}
		prefix := openEntryKey("")
		it, err := h.s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: []byte{famOpen, 'e' + 1}})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		for it.First(); it.Valid(); it.Next() {
			if id := string(it.Key()[len(prefix):]); st.act.entries[id] == nil {
				t.Fatalf("request %q is no longer held and still has a key", id)
			}
		}
	}
	last := f.lastCkpt
	for lo := 0; lo < len(recs); lo += 7 {
		applyIn(t, h.s, recs[lo:min(lo+7, len(recs))], 7)
		if f.lastCkpt != last {
			last = f.lastCkpt
			check()
		}
	}
	// Requests never ended are held past the replay window, so written;
	// those not prefilled get their prefill_done now, which changes them and
	// keeps them held, then new decisions move the clock past the next
	// checkpoint.
	var late []*kgo.Record
	for _, e := range st.act.entries {
		if e.stored && e.flags&(fTerminal|fPrefillDone) == 0 {
			w := &pb.WorkerRef{WorkerId: st.workers[e.decodeSlot].wr.id}
			late = append(late, h.record(w.GetWorkerId(), deltaOf(&pb.OutcomeEvent{DecisionId: e.decisionID(), RequestId: e.requestID,
				DecodeWorker: w, Kind: pb.OutcomeEvent_KIND_PREFILL_DONE, EventTimeUnixNano: st.reqNow + 1})))
		}
	}
	applyIn(t, h.s, late, 64)
	var changed []*reqEntry
	for _, e := range st.act.entries {
		if e.stored && e.ver != e.storedVer {
			changed = append(changed, e)
		}
	}
	ds := perfDecisions(60, 12, 0)
	cutChains(ds, events.MaxDeltaHashes)
	var more []*kgo.Record
	for i, d := range ds {
		d.DecidedAtUnixNano = st.reqNow + int64(i+1)*200e6
		more = append(more, h.record(d.GetDecodeWorker().GetWorkerId(), deltaOf(d)))
	}
	applyIn(t, h.s, more, 7)
	if f.lastCkpt == last {
		t.Fatal("no checkpoint after the late completions")
	}
	check()
	held := 0
	for _, e := range changed {
		if !e.dropped {
			held++
		}
	}
	if checked == 0 || held == 0 {
		t.Fatalf("%d requests checked against their keys, %d changed after a checkpoint wrote them and still held: the test reached neither", checked, held)
	}
	t.Logf("%d requests checked against their keys; %d changed after a checkpoint wrote them, still held", checked, held)
}
