package statestore

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// shareT0 is the writers' clock of the rows' tests: before the harness's
// log times (1.7e18 ns), as a writer's clock is before its append.
const shareT0 = int64(1_699_999_000) * 1e9

const sec = int64(time.Second)

// shareReplica is the replica id of the stores of the rows' tests.
const shareReplica = "replica-a"

// sharesHarness opens a store of load shares for shareReplica with o, and
// registers the decode workers w1..w3 and the prefill worker p1.
func sharesHarness(t testing.TB, o Options) *harness {
	t.Helper()
	o.Source = SourceLoadShares
	if o.ReplicaID == "" {
		o.ReplicaID = shareReplica
	}
	h := newHarnessWith(t, 4, o)
	for _, id := range []string{"w1", "w2", "w3"} {
		h.put(id, registration(id, pb.Pool_POOL_DECODE, 16, 0))
	}
	h.put("p1", registration("p1", pb.Pool_POOL_PREFILL, 16, 0))
	return h
}

func sharesOf(writer string, seq uint64, clock int64, ss ...*pb.WorkerShare) *pb.LoadShares {
	return &pb.LoadShares{WriterId: writer, Seq: seq, ClockUnixNano: clock, Shares: ss}
}

// shr is a share of worker id (rank 0): blocks, requests, prefill tokens,
// recent decisions, recent local tokens.
func shr(id string, blocks uint64, reqs uint32, prefill uint64, recent uint32, local uint64) *pb.WorkerShare {
	return &pb.WorkerShare{Worker: &pb.WorkerRef{WorkerId: id}, DecodeBlocks: blocks, Requests: reqs, PrefillTokens: prefill,
		RecentDecisions: recent, RecentLocalTokens: local}
}

// active is the view's active load of worker id (rank 0).
func (h *harness) active(id string) decider.ActiveLoad {
	h.t.Helper()
	var a decider.ActiveLoad
	found := false
	h.s.Read(func(v View) {
		for ref, w := range v.Workers() {
			if w.ID == id {
				a, found = v.Active(decider.WorkerRef(ref)), true
			}
		}
	})
	if !found {
		h.t.Fatalf("worker %s is not in the view", id)
	}
	return a
}

func load(blocks, reqs, prefill, recent, local int64) decider.ActiveLoad {
	return decider.ActiveLoad{DecodeBlocks: blocks, Requests: reqs, PrefillTokens: prefill, RecentRequests: recent, RecentLocalPrefill: local}
}

func (h *harness) wantActive(id string, want decider.ActiveLoad) {
	h.t.Helper()
	if got := h.active(id); got != want {
		h.t.Fatalf("active load of %s: %+v, want %+v", id, got, want)
	}
}

// wantCount fails unless the series of name with labels is want.
func (h *harness) wantCount(name string, labels map[string]string, want float64) {
	h.t.Helper()
	if got := h.counter(name, labels); got != want {
		h.t.Fatalf("%s%v: %v, want %v", name, labels, got, want)
	}
}

func (h *harness) shareResult(result string) float64 {
	return h.counter("pdrouter_statestore_share_records_total", map[string]string{"result": result})
}

// TestShareRowsReplaceBySeq: a writer's row of a worker is replaced by a
// record of a higher seq only; the rows of writers add up; a zero share
// deletes the row.
func TestShareRowsReplaceBySeq(t *testing.T) {
	h := sharesHarness(t, Options{})
	h.put("b", sharesOf("b", 2, shareT0, shr("w1", 10, 2, 100, 3, 50), shr("p1", 0, 0, 70, 1, 0)))
	h.wantActive("w1", load(10, 2, 100, 3, 50))
	h.wantActive("p1", load(0, 0, 70, 1, 0))
	h.put("b", sharesOf("b", 1, shareT0+sec, shr("w1", 99, 9, 9, 9, 9)))
	h.wantActive("w1", load(10, 2, 100, 3, 50))
	h.wantCount("pdrouter_statestore_share_records_total", map[string]string{"result": "stale_seq"}, 1)
	h.put("b", sharesOf("b", 3, shareT0+2*sec, shr("w1", 4, 1, 0, 4, 0)))
	h.wantActive("w1", load(4, 1, 0, 4, 0))
	h.wantActive("p1", load(0, 0, 70, 1, 0)) // not in seq 3: kept
	h.put("c", sharesOf("c", 7, shareT0+2*sec, shr("w1", 6, 3, 10, 1, 10)))
	h.wantActive("w1", load(10, 4, 10, 5, 10))
	h.wantCount("pdrouter_statestore_share_rows", nil, 3)
	// A zero share: the row is gone, the other writer's stays.
	h.put("b", sharesOf("b", 4, shareT0+3*sec, shr("w1", 0, 0, 0, 0, 0)))
	h.wantActive("w1", load(6, 3, 10, 1, 10))
	h.wantCount("pdrouter_statestore_share_rows", nil, 2)
	h.wantCount("pdrouter_statestore_share_records_total", map[string]string{"result": "applied"}, 4)
}

// TestShareRowsCommitNothing: a batch of load-shares records alone moves
// the rows and what readers see, and commits nothing: their offsets are
// not stored and they move no clock, so a peer's fetch of a snapshot costs
// no write.
func TestShareRowsCommitNothing(t *testing.T) {
	h := sharesHarness(t, Options{})
	commits := 0
	testHookBeforeCommit = func() { commits++ }
	defer func() { testHookBeforeCommit = nil }()
	h.apply(h.record("b", sharesOf("b", 1, shareT0, shr("w1", 10, 1, 0, 0, 0))))
	h.apply(h.record("c", sharesOf("c", 1, shareT0, shr("w2", 4, 1, 0, 0, 0))), h.record("b", sharesOf("b", 2, shareT0+sec, shr("w1", 20, 2, 0, 0, 0))))
	if commits != 0 {
		t.Fatalf("batches of load shares alone committed %d times; they store nothing", commits)
	}
	// What a reader sees moved all the same.
	h.wantActive("w1", load(20, 2, 0, 0, 0))
	h.wantCount("pdrouter_statestore_share_rows", nil, 2)
	h.apply(h.record("w1", registration("w1", pb.Pool_POOL_DECODE, 16, 0)), h.record("b", sharesOf("b", 3, shareT0+sec, shr("w1", 30, 3, 0, 0, 0))))
	if commits != 1 {
		t.Fatalf("a batch with a registration committed %d times, want 1", commits)
	}
	h.wantActive("w1", load(30, 3, 0, 0, 0))
}

// TestShareRowsExpire: a row counts while its writer's clock plus the
// active expiry is ahead of sharesNow, its recent counts while the recent
// window is; a record already expired when read counts nothing; a writer
// that comes back counts again; a record stamped before its writer's
// previous one counts from the writer's clock.
func TestShareRowsExpire(t *testing.T) {
	h := sharesHarness(t, Options{ActiveExpiry: 60 * time.Second})
	h.put("b", sharesOf("b", 1, shareT0, shr("w1", 10, 2, 100, 3, 50)))
	h.wantActive("w1", load(10, 2, 100, 3, 50))
	// Another writer moves sharesNow past b's recent window.
	h.put("c", sharesOf("c", 1, shareT0+30*sec, shr("w2", 1, 1, 0, 0, 0)))
	h.wantActive("w1", load(10, 2, 100, 0, 0))
	h.wantCount("pdrouter_statestore_share_rows_counting", nil, 2)
	// ... and past b's expiry: b is dead.
	h.put("c", sharesOf("c", 2, shareT0+60*sec, shr("w2", 1, 1, 0, 0, 0)))
	h.wantActive("w1", load(0, 0, 0, 0, 0))
	h.wantCount("pdrouter_statestore_share_rows_counting", nil, 1)
	// A record of b stamped long ago: already absent.
	h.put("b", sharesOf("b", 2, shareT0, shr("w1", 5, 5, 5, 5, 5)))
	h.wantActive("w1", load(0, 0, 0, 0, 0))
	h.wantCount("pdrouter_statestore_share_records_total", map[string]string{"result": "expired"}, 1)
	// b back, with the current clock.
	h.put("b", sharesOf("b", 3, shareT0+61*sec, shr("w1", 7, 1, 0, 1, 0)))
	h.wantActive("w1", load(7, 1, 0, 1, 0))
	// A record stamped before its writer's previous one is as fresh as
	// that one: its rows take the writer's clock (61 s), and so count
	// until 121 s, not 75 s.
	h.put("b", sharesOf("b", 4, shareT0+15*sec, shr("w3", 3, 1, 0, 0, 0)))
	h.put("c", sharesOf("c", 3, shareT0+100*sec, shr("w2", 1, 1, 0, 0, 0)))
	h.wantActive("w3", load(3, 1, 0, 0, 0))
	h.put("c", sharesOf("c", 4, shareT0+121*sec, shr("w2", 1, 1, 0, 0, 0)))
	h.wantActive("w3", load(0, 0, 0, 0, 0))
}

// TestShareRowsDueBounded: a row updated by every record of its writer
// keeps at most one item in the due heap, whatever its updates: a writer
// sends a busy worker with most of its snapshots, and items pushed per
// update would pile up for an active expiry (minutes) before they fall
// due. The rows still leave the window and expire on time.
func TestShareRowsDueBounded(t *testing.T) {
	h := sharesHarness(t, Options{ActiveExpiry: 60 * time.Second})
	for i := range 200 {
		h.put("b", sharesOf("b", uint64(i+1), shareT0+int64(i)*sec/10, shr("w1", uint64(i+1), 1, 0, 1, 0), shr("w2", 1, 1, 0, 0, 0)))
	}
	var due int
	h.s.mu.Lock()
	due = h.s.st.shares.due.Len()
	h.s.mu.Unlock()
	if due > 2 {
		t.Fatalf("%d items in the due heap for 2 rows after 200 updates", due)
	}
	last := shareT0 + 199*sec/10
	h.wantActive("w1", load(200, 1, 0, 1, 0))
	h.put("c", sharesOf("c", 1, last+30*sec, shr("w3", 1, 1, 0, 0, 0)))
	h.wantActive("w1", load(200, 1, 0, 0, 0))
	h.put("c", sharesOf("c", 2, last+60*sec, shr("w3", 1, 1, 0, 0, 0)))
	h.wantActive("w1", load(0, 0, 0, 0, 0))
	h.wantActive("w2", load(0, 0, 0, 0, 0))
}

// TestShareRowsTotalBound: past the rows a store holds in all, a share of
// a new row is refused (too_many_workers) whatever its writer, the
// record's other shares apply, and rows already held are still replaced.
func TestShareRowsTotalBound(t *testing.T) {
	h := sharesHarness(t, Options{})
	h.s.mu.Lock()
	h.s.st.shares.maxTotal = 3
	h.s.mu.Unlock()
	h.put("b", sharesOf("b", 1, shareT0, shr("w1", 1, 1, 0, 0, 0), shr("w2", 1, 1, 0, 0, 0)))
	h.put("c", sharesOf("c", 1, shareT0, shr("w1", 2, 1, 0, 0, 0), shr("w3", 5, 1, 0, 0, 0)))
	h.wantCount("pdrouter_statestore_share_rows", nil, 3)
	h.wantCount("pdrouter_statestore_share_records_total", map[string]string{"result": "too_many_workers"}, 1)
	h.wantActive("w1", load(3, 2, 0, 0, 0))
	h.wantActive("w3", load(0, 0, 0, 0, 0))
	h.put("c", sharesOf("c", 2, shareT0, shr("w1", 4, 1, 0, 0, 0)))
	h.wantActive("w1", load(5, 2, 0, 0, 0))
}

// TestShareRowsOwnNotCounted: the replica applies its own snapshots (its
// rows are held like any) but never counts them: its own requests are in
// its slots already.
func TestShareRowsOwnNotCounted(t *testing.T) {
	h := sharesHarness(t, Options{})
	h.put(shareReplica, sharesOf(shareReplica, 1, shareT0, shr("w1", 10, 2, 100, 3, 50)))
	h.wantActive("w1", load(0, 0, 0, 0, 0))
	h.wantCount("pdrouter_statestore_share_rows", nil, 1)
	h.wantCount("pdrouter_statestore_share_rows_counting", nil, 0)
}

// TestShareRowsWaitForSlot: a row of a worker nobody registered makes no
// slot; it counts once the worker registers.
func TestShareRowsWaitForSlot(t *testing.T) {
	h := sharesHarness(t, Options{})
	before, _ := h.slotCount()
	h.put("b", sharesOf("b", 1, shareT0, shr("w9", 10, 2, 100, 3, 50)))
	if after, _ := h.slotCount(); after != before {
		t.Fatalf("a row made a slot: %d slots, %d before", after, before)
	}
	h.put("w9", registration("w9", pb.Pool_POOL_DECODE, 16, 0))
	h.wantActive("w9", load(10, 2, 100, 3, 50))
}

// shareLog makes per writer (b, c, d, and the replica itself) a
// partition of up to n records on one timeline, 10 s apart: c stops
// halfway (its rows expire), d's clock is 400 s behind (its records are
// past the expiry when read after the others'), some seqs go back
// (stale); random shares of w1..w3, p1 and an unregistered w9, zeros
// included.
func shareLog(h *harness, n int, rng *rand.Rand) [][]*kgo.Record {
	var parts [][]*kgo.Record
	for _, w := range []string{"b", "c", "d", shareReplica} {
		var recs []*kgo.Record
		seq := uint64(1)
		for i := range n {
			if w == "c" && i > n/2 {
				break
			}
			clock := shareT0 + int64(i)*10*sec + int64(rng.IntN(5))*sec
			if w == "d" {
				clock -= 400 * sec
			}
			seq += uint64(1 + rng.IntN(2))
			if rng.IntN(10) == 0 {
				seq -= 2 // back: stale
			}
			var ss []*pb.WorkerShare
			for _, id := range []string{"w1", "w2", "w3", "p1", "w9"} {
				if rng.IntN(2) == 0 {
					continue
				}
				r := uint32(rng.IntN(3))
				s := shr(id, uint64(r)*uint64(rng.IntN(50)), r, uint64(rng.IntN(3))*100, uint32(rng.IntN(3)), 0)
				if s.RecentDecisions > 0 {
					s.RecentLocalTokens = uint64(rng.IntN(100))
				}
				ss = append(ss, s)
			}
			if len(ss) == 0 || seq == 0 {
				seq = max(seq, 1)
				continue
			}
			recs = append(recs, h.record(w, sharesOf(w, seq, clock, ss...)))
		}
		parts = append(parts, recs)
	}
	return parts
}

// interleave merges the partitions in a random order that keeps each
// partition's order, as a consumer reads them.
func interleave(parts [][]*kgo.Record, rng *rand.Rand) []*kgo.Record {
	at := make([]int, len(parts))
	var out []*kgo.Record
	for {
		var open []int
		for i, p := range parts {
			if at[i] < len(p) {
				open = append(open, i)
			}
		}
		if len(open) == 0 {
			return out
		}
		i := open[rng.IntN(len(open))]
		out = append(out, parts[i][at[i]])
		at[i]++
	}
}

// TestShareRowsAnyOrder: replicas that read the writers' partitions
// interleaved differently, in batches of any size, and again (a
// re-delivery), hold the same rows and counts at the same offsets; and a
// replica of another writer id at the same offsets has the same digest
// (it counts the rows of the writer the first one does not, and not its
// own).
func TestShareRowsAnyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	first := sharesHarness(t, Options{})
	parts := shareLog(first, 40, rng)
	all := interleave(parts, rng)
	applyIn(t, first.s, all, 7)
	want := first.digest()
	views := map[string]decider.ActiveLoad{}
	for _, id := range []string{"w1", "w2", "w3", "p1"} {
		views[id] = first.active(id)
	}
	if first.shareResult("stale_seq") == 0 || first.shareResult("expired") == 0 || first.counter("pdrouter_statestore_share_rows_counting", nil) == 0 {
		t.Fatalf("the log exercises too little: stale %v, expired %v, counting %v", first.shareResult("stale_seq"),
			first.shareResult("expired"), first.counter("pdrouter_statestore_share_rows_counting", nil))
	}
	for i := range 6 {
		h := sharesHarness(t, Options{})
		recs := interleave(parts, rng)
		applyIn(t, h.s, recs, 1+rng.IntN(20))
		applyIn(t, h.s, recs[:len(recs)/2], 5) // read again: skipped
		if got := h.digest(); got.Hash != want.Hash {
			t.Fatalf("order %d: digest %x, want %x", i, got.Hash, want.Hash)
		}
		for id, w := range views {
			h.wantActive(id, w)
		}
	}
	other := sharesHarness(t, Options{ReplicaID: "b"})
	applyIn(t, other.s, all, 13)
	if got := other.digest(); got.Hash != want.Hash {
		t.Fatalf("replica b: digest %x, want %x", got.Hash, want.Hash)
	}
}

// rawValue frames value as a load-shares record keyed key, past
// events.NewRecord's validation.
func (h *harness) rawValue(key string, value []byte) *kgo.Record {
	r := &kgo.Record{Topic: events.Names{}.Physical(events.TopicLoadShares), Key: []byte(key), Value: value,
		Headers: []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte(events.SchemaOf(events.TopicLoadShares))}}}
	return h.place(events.TopicLoadShares, r)
}

// TestShareRowsHostile: a record breaking each rule of events.LoadShares
// is refused by the decoder, counted with its reason (series there from
// the start), and skipped: its offset advances and the records after it
// apply. The state's bounds refuse a writer past maxShareWriters and a
// writer's worker past MaxWorkers, counted.
func TestShareRowsHostile(t *testing.T) {
	h := sharesHarness(t, Options{MaxWorkers: 8})
	for _, r := range events.LoadSharesReasons {
		if h.series("pdrouter_records_invalid_total", map[string]string{"topic": "load-shares", "reason": r}) == nil {
			t.Fatalf("no series of reason %s at start", r)
		}
	}
	for _, r := range shareResults {
		if h.series("pdrouter_statestore_share_records_total", map[string]string{"result": r}) == nil {
			t.Fatalf("no series of result %s at start", r)
		}
	}
	ok := shr("w1", 1, 1, 0, 0, 0)
	many := make([]*pb.WorkerShare, events.MaxShareWorkers+1)
	for i := range many {
		many[i] = shr(fmt.Sprintf("x%d", i), 0, 1, 0, 0, 0)
	}
	marshal := func(s *pb.LoadShares) []byte {
		v, err := proto.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tooMany := sharesOf("b", 1, shareT0, ok)
	for range events.MaxShareSamples + 1 {
		tooMany.Samples = append(tooMany.Samples, &pb.LatencySample{})
	}
	noTarget := sharesOf("b", 1, shareT0, ok)
	noTarget.Samples = []*pb.LatencySample{{DecisionId: "d1", LatencyInputs: make([]uint32, events.LoadDeltaLatencyInputs)}}
	cases := map[string]*kgo.Record{
		events.ReasonSharesTooLarge:        h.rawValue("b", make([]byte, events.MaxSharesBytes+1)),
		events.ReasonSharesMalformed:       h.rawValue("b", []byte{0x0a, 0xff}),
		events.ReasonSharesEmpty:           h.raw("b", sharesOf("b", 1, shareT0)),
		events.ReasonSharesTooManyWorkers:  h.rawValue("b", marshal(sharesOf("b", 1, shareT0, many...))),
		events.ReasonSharesBadWriter:       h.raw("", sharesOf("", 1, shareT0, ok)),
		events.ReasonSharesKeyMismatch:     h.raw("c", sharesOf("b", 1, shareT0, ok)),
		events.ReasonSharesBadSeq:          h.raw("b", sharesOf("b", 0, shareT0, ok)),
		events.ReasonSharesClock:           h.raw("b", sharesOf("b", 1, 2e18, ok)),
		events.ReasonSharesBadWorker:       h.raw("b", sharesOf("b", 1, shareT0, shr("", 1, 1, 0, 0, 0))),
		events.ReasonSharesDuplicateWorker: h.raw("b", sharesOf("b", 1, shareT0, ok, ok)),
		events.ReasonSharesBadCount:        h.raw("b", sharesOf("b", 1, shareT0, shr("w1", events.MaxShareCount+1, 1, 0, 0, 0))),
		// In the order of LoadSharesReasons: each record's offset follows
		// the one before.
		events.ReasonSharesTooManySamples: h.rawValue("b", marshal(tooMany)),
		events.ReasonSharesBadSample:      h.raw("b", noTarget),
	}
	for _, r := range events.LoadSharesReasons {
		rec := cases[r]
		if rec == nil {
			t.Fatalf("no case for reason %s", r)
		}
		h.apply(rec)
		if n := h.invalid(events.TopicLoadShares, r); n != 1 {
			t.Fatalf("reason %s: counted %v times, want 1", r, n)
		}
		if next, _ := h.s.Offsets().Get(events.TopicLoadShares, rec.Partition); next != rec.Offset+1 {
			t.Fatalf("reason %s: offset %d after the record at %d", r, next, rec.Offset)
		}
	}
	h.wantActive("w1", load(0, 0, 0, 0, 0))
	h.put("b", sharesOf("b", 1, shareT0, ok))
	h.wantActive("w1", load(1, 1, 0, 0, 0))

	// A writer's workers past MaxWorkers: the new ones refused, the
	// others applied.
	var nine []*pb.WorkerShare
	for i := range 9 {
		nine = append(nine, shr(fmt.Sprintf("y%d", i), 0, 1, 0, 0, 0))
	}
	h.put("c", sharesOf("c", 1, shareT0, nine...))
	h.wantCount("pdrouter_statestore_share_records_total", map[string]string{"result": "too_many_workers"}, 1)
	h.wantCount("pdrouter_statestore_share_rows", nil, 9) // b's one and c's eight
	// Writers past maxShareWriters: refused whole.
	var recs []*kgo.Record
	for i := range maxShareWriters {
		w := fmt.Sprintf("f%04d", i)
		recs = append(recs, h.record(w, sharesOf(w, 1, shareT0, shr("w2", 0, 1, 0, 0, 0))))
	}
	h.apply(recs...)
	h.wantCount("pdrouter_statestore_share_records_total", map[string]string{"result": "too_many_writers"}, 2) // b and c came first
	h.wantActive("w2", load(0, maxShareWriters-2, 0, 0, 0))
}
