package statestore

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// ownDecision is the load delta of one decision of writer w: on decode,
// prefilled locally when prefill is "", of tokens prompt tokens.
func ownDecision(w, id, decode, prefill string, at int64, tokens uint32) *pb.LoadDelta {
	e := &pb.DecisionDelta{DecisionId: id, RequestId: "r" + id, DecidedAtUnixNano: at, DecodeWorker: &pb.WorkerRef{WorkerId: decode},
		BlockSize: 16, PromptTokens: tokens, EffectiveIsl: tokens / 2}
	if prefill == "" {
		e.Local = true
	} else {
		e.PrefillWorker = &pb.WorkerRef{WorkerId: prefill}
	}
	return &pb.LoadDelta{WriterId: w, Decisions: []*pb.DecisionDelta{e}}
}

// ownEnd is the load delta of the completion of decision id.
func ownEnd(w, id, decode string, at int64) *pb.LoadDelta {
	return &pb.LoadDelta{WriterId: w, Lifecycle: []*pb.LifecycleDelta{{DecisionId: id, RequestId: "r" + id,
		Kind: pb.OutcomeEvent_KIND_COMPLETED, EventTimeUnixNano: at, DecodeWorker: &pb.WorkerRef{WorkerId: decode}}}}
}

// take is TakeShares, checked against the record's rules and, for each
// share, against the worker's active load (the store has no peers' rows in
// these tests, so the view holds the replica's own share).
func (h *harness) take() *pb.LoadShares {
	h.t.Helper()
	s := h.s.TakeShares()
	if s == nil {
		return nil
	}
	if err := events.ValidateLoadShares(s, h.opts.ReplicaID, time.Time{}); err != nil {
		h.t.Fatalf("TakeShares: %v", err)
	}
	for _, e := range s.GetShares() {
		if !h.inView(e.GetWorker().GetWorkerId()) {
			continue // not registered: checked by the test
		}
		a := h.active(e.GetWorker().GetWorkerId())
		got := load(int64(e.GetDecodeBlocks()), int64(e.GetRequests()), int64(e.GetPrefillTokens()), int64(e.GetRecentDecisions()), int64(e.GetRecentLocalTokens()))
		if got != a {
			h.t.Fatalf("share of %s: %+v, the worker's own load is %+v", e.GetWorker().GetWorkerId(), got, a)
		}
	}
	return s
}

func (h *harness) inView(id string) bool {
	found := false
	h.s.Read(func(v View) {
		for _, w := range v.Workers() {
			found = found || w.ID == id
		}
	})
	return found
}

func workersOf(s *pb.LoadShares) []string {
	var out []string
	for _, e := range s.GetShares() {
		out = append(out, e.GetWorker().GetWorkerId())
	}
	return out
}

// TestTakeShares: after own decisions the workers they named go in the
// next snapshot, in worker order, with the next seq and the store's
// clock; nothing more until a share changes; a completion sends its
// workers' shares again (its requests and prefill tokens gone, its recent
// decision still in the window), and the end of the window sends zero
// shares. The same whether the store holds its own requests as facts or
// as open requests (PeerSums).
func TestTakeShares(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprintf("open=%v", open), func(t *testing.T) { testTakeShares(t, open) })
	}
}

func testTakeShares(t *testing.T, open bool) {
	h := sharesHarness(t, Options{SharesEpoch: 1000, PeerSums: open})
	if s := h.take(); s != nil {
		t.Fatalf("a snapshot before the store has a clock: %v", s)
	}
	h.put("w2", ownDecision(shareReplica, "d1", "w2", "p1", shareT0, 100))
	h.put("w1", ownDecision(shareReplica, "d2", "w1", "", shareT0+sec, 40))
	s := h.take()
	if s.GetSeq() != 1001 || s.GetClockUnixNano() != shareT0+sec || s.GetWriterId() != shareReplica {
		t.Fatalf("snapshot: seq %d clock %d writer %q", s.GetSeq(), s.GetClockUnixNano(), s.GetWriterId())
	}
	if got := fmt.Sprint(workersOf(s)); got != "[p1 w1 w2]" {
		t.Fatalf("workers %s, want [p1 w1 w2]", got)
	}
	if w1 := s.GetShares()[1]; w1.GetRequests() != 1 || w1.GetDecodeBlocks() != 3 || w1.GetRecentLocalTokens() != 20 {
		t.Fatalf("w1's share: %v", w1)
	}
	if s := h.take(); s != nil {
		t.Fatalf("a snapshot with nothing changed: %v", s)
	}
	h.put("w2", ownEnd(shareReplica, "d1", "w2", shareT0+2*sec))
	s = h.take()
	if s.GetSeq() != 1002 || fmt.Sprint(workersOf(s)) != "[p1 w2]" {
		t.Fatalf("after the completion: seq %d workers %v", s.GetSeq(), workersOf(s))
	}
	if p1 := s.GetShares()[0]; p1.GetPrefillTokens() != 0 || p1.GetRecentDecisions() != 1 {
		t.Fatalf("p1's share after the completion: %v", p1)
	}
	if w2 := s.GetShares()[1]; w2.GetRequests() != 0 || w2.GetDecodeBlocks() != 0 || w2.GetRecentDecisions() != 1 {
		t.Fatalf("w2's share after the completion: %v", w2)
	}
	// The window ends for d1 and d2: p1's and w2's shares are zero now.
	h.put("w3", ownDecision(shareReplica, "d3", "w3", "", shareT0+40*sec, 16))
	s = h.take()
	if got := fmt.Sprint(workersOf(s)); got != "[p1 w1 w2 w3]" {
		t.Fatalf("after the window: workers %s", got)
	}
	if z := s.GetShares()[2]; proto.Size(z) != proto.Size(&pb.WorkerShare{Worker: z.GetWorker()}) {
		t.Fatalf("w2's share after the window: %v, want zero", z)
	}
}

// TestSharesUnsent: pdrouter_statestore_share_unsent_workers counts the
// workers changed since the last snapshot taken, then those of the
// snapshot in flight, until the log acknowledges it (SharesSent) or it
// comes back (SharesNotSent): it is 0 only once peers can read every
// share this writer changed.
func TestSharesUnsent(t *testing.T) {
	h := sharesHarness(t, Options{SharesEpoch: 1000})
	const unsent = "pdrouter_statestore_share_unsent_workers"
	h.wantCount(unsent, nil, 0)
	h.put("w1", ownDecision(shareReplica, "d1", "w1", "p1", shareT0, 100))
	h.wantCount(unsent, nil, 2) // w1 and p1
	s := h.take()
	h.wantCount(unsent, nil, 2) // in flight
	h.s.SharesNotSent(s)
	h.wantCount(unsent, nil, 2) // back, waiting
	s = h.take()
	h.s.SharesSent(s)
	h.wantCount(unsent, nil, 0)
}

// TestSharesOfUnregisteredWorker: the slot of a worker nobody registered
// stays while its share is to be sent, even when the request that made it
// is dropped in the same chunk as its share changes (an open request
// dropped as its decision leaves the recent window), and goes once its
// zero share is taken.
func TestSharesOfUnregisteredWorker(t *testing.T) {
	h := sharesHarness(t, Options{PeerSums: true})
	h.put("u1", ownDecision(shareReplica, "d1", "u1", "", shareT0, 16))
	h.put("u1", ownEnd(shareReplica, "d1", "u1", shareT0+sec))
	if s := h.take(); fmt.Sprint(workersOf(s)) != "[u1]" || s.GetShares()[0].GetRecentDecisions() != 1 {
		t.Fatalf("snapshot %v", s)
	}
	// u1's partition's clock passes the window: d1 is dropped, and u1's
	// recent decision goes with it.
	h.put("u1", ownEnd(shareReplica, "none", "u1", shareT0+40*sec))
	s := h.take()
	if got := fmt.Sprint(workersOf(s)); got != "[u1]" || proto.Size(s.GetShares()[0]) != proto.Size(&pb.WorkerShare{Worker: s.GetShares()[0].GetWorker()}) {
		t.Fatalf("snapshot %v, want u1's zero share", s)
	}
	h.put("w1", ownDecision(shareReplica, "d2", "w1", "", shareT0+41*sec, 16))
	if _, ok := h.s.st.lookupSlot("u1", 0); ok {
		t.Fatal("u1's slot is still there after its zero share")
	}
}

// TestSharesNotSent: a snapshot handed back goes again, with a new seq,
// whether or not its workers' shares changed since; a worker whose slot is
// gone goes as a zero share.
func TestSharesNotSent(t *testing.T) {
	h := sharesHarness(t, Options{})
	h.put("w1", ownDecision(shareReplica, "d1", "w1", "p1", shareT0, 100))
	first := h.take()
	if h.take() != nil {
		t.Fatal("a second snapshot with nothing changed")
	}
	h.s.SharesNotSent(first)
	h.s.SharesNotSent(sharesOf(shareReplica, 9, shareT0, shr("gone", 0, 0, 0, 0, 0)))
	again := h.take()
	if again.GetSeq() != first.GetSeq()+1 {
		t.Fatalf("seq %d after %d", again.GetSeq(), first.GetSeq())
	}
	if got := fmt.Sprint(workersOf(again)); got != "[gone p1 w1]" || proto.Size(again.GetShares()[0]) != proto.Size(&pb.WorkerShare{Worker: again.GetShares()[0].GetWorker()}) {
		t.Fatalf("workers sent again: %s", got)
	}
	if !proto.Equal(again.GetShares()[1], first.GetShares()[0]) || !proto.Equal(again.GetShares()[2], first.GetShares()[1]) {
		t.Fatalf("shares sent again: %v, first %v", again.GetShares(), first.GetShares())
	}
}

// TestTakeSharesKeepalive: a nonzero share not sent for ActiveExpiry/2 of
// the store's clock goes again unchanged, so peers do not drop it.
func TestTakeSharesKeepalive(t *testing.T) {
	h := sharesHarness(t, Options{ActiveExpiry: 100 * time.Second})
	h.put("w1", ownDecision(shareReplica, "d1", "w1", "", shareT0, 100))
	h.take()
	h.put("w2", ownDecision(shareReplica, "d2", "w2", "", shareT0+40*sec, 100))
	s := h.take() // w1's recent decision left the window; w2 is new
	if got := fmt.Sprint(workersOf(s)); got != "[w1 w2]" {
		t.Fatalf("workers %s", got)
	}
	h.put("w3", ownDecision(shareReplica, "d3", "w3", "", shareT0+80*sec, 100))
	s = h.take() // w2's window ended; w1 was sent 40 s ago
	if got := fmt.Sprint(workersOf(s)); got != "[w2 w3]" {
		t.Fatalf("workers %s before w1's keepalive", got)
	}
	h.put("w3", ownDecision(shareReplica, "d4", "w3", "", shareT0+90*sec, 100))
	s = h.take() // w1 last sent at 40 s: due at 90 s
	if got := fmt.Sprint(workersOf(s)); got != "[w1 w3]" {
		t.Fatalf("workers %s, want w1's keepalive and w3", got)
	}
}

// TestTakeSharesBound: a snapshot carries at most events.MaxShareWorkers
// shares, in worker order; the rest go in the next one, and the signal
// says so.
func TestTakeSharesBound(t *testing.T) {
	h := sharesHarness(t, Options{})
	h.put("w1", ownDecision(shareReplica, "d1", "w1", "", shareT0, 16))
	h.take()
	n := events.MaxShareWorkers + 2
	h.s.mu.Lock()
	st := h.s.st
	for i := n - 1; i >= 0; i-- { // dirty in reverse order
		slot := st.slotOf(fmt.Sprintf("x%05d", i), 0)
		st.workers[slot].activeRequests = 1
		st.shareChanged(slot)
	}
	h.s.mu.Unlock()
	<-h.s.SharesChanged() // the changes'
	s := h.s.TakeShares()
	if len(s.GetShares()) != events.MaxShareWorkers || s.GetShares()[0].GetWorker().GetWorkerId() != "x00000" {
		t.Fatalf("%d shares, first %v", len(s.GetShares()), s.GetShares()[0].GetWorker())
	}
	if err := events.ValidateLoadShares(s, shareReplica, time.Time{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.s.SharesChanged():
	default:
		t.Fatal("no signal for the shares left")
	}
	rest := h.s.TakeShares()
	if got := fmt.Sprint(workersOf(rest)); got != fmt.Sprintf("[x%05d x%05d]", n-2, n-1) {
		t.Fatalf("the rest: %s", got)
	}
}

// TestSharesChanged: one signal when the first share changes, none while
// the dirty set is not empty, another after a snapshot took it.
func TestSharesChanged(t *testing.T) {
	h := sharesHarness(t, Options{})
	ch := h.s.SharesChanged()
	if ch == nil || cap(ch) != 1 {
		t.Fatal("no channel of capacity 1")
	}
	select {
	case <-ch:
		t.Fatal("a signal before any change")
	default:
	}
	h.put("w1", ownDecision(shareReplica, "d1", "w1", "", shareT0, 16))
	h.put("w2", ownDecision(shareReplica, "d2", "w2", "", shareT0, 16))
	<-ch
	select {
	case <-ch:
		t.Fatal("a second signal before the snapshot")
	default:
	}
	h.take()
	h.put("w3", ownDecision(shareReplica, "d3", "w3", "", shareT0, 16))
	select {
	case <-ch:
	default:
		t.Fatal("no signal after the snapshot")
	}
	if o := newHarness(t, 1); o.s.SharesChanged() != nil || o.s.TakeShares() != nil {
		t.Fatal("a store of decisions shares load")
	}
}

// TestOwnSeqFromLog: a snapshot of this writer read from the log moves
// the next seq past it (a store rebuilt with an old epoch never reuses a
// seq).
func TestOwnSeqFromLog(t *testing.T) {
	h := sharesHarness(t, Options{})
	h.put(shareReplica, sharesOf(shareReplica, 5000, shareT0, shr("w2", 0, 1, 0, 0, 0)))
	h.put("w1", ownDecision(shareReplica, "d1", "w1", "", shareT0, 16))
	if s := h.take(); s.GetSeq() != 5001 {
		t.Fatalf("seq %d after 5000 on the log", s.GetSeq())
	}
}

// TestOwnSeqAtTheEnd: a snapshot of this writer at the largest seq (forged,
// or a writer's clock far ahead) leaves the next seq at the largest, never
// wrapped to 0, which no reader accepts: the writer keeps writing valid
// snapshots, which peers ignore as stale, instead of none at all.
func TestOwnSeqAtTheEnd(t *testing.T) {
	h := sharesHarness(t, Options{})
	h.put(shareReplica, sharesOf(shareReplica, math.MaxUint64, shareT0, shr("w2", 0, 1, 0, 0, 0)))
	h.put("w1", ownDecision(shareReplica, "d1", "w1", "", shareT0, 16))
	s := h.take()
	if s.GetSeq() != math.MaxUint64 {
		t.Fatalf("seq %d after %d on the log", s.GetSeq(), uint64(math.MaxUint64))
	}
	if err := events.ValidateLoadShares(s, shareReplica, time.Time{}); err != nil {
		t.Fatalf("the snapshot after the largest seq: %v", err)
	}
}

// TestReplicaIDConflict: a snapshot under this replica's id that it did not
// take, read after one of its own came back, is another writer's, counted
// and logged; before that (an earlier run of this replica, read again at
// open), after a snapshot that was taken but never written, and for a copy
// of its own, nothing is counted. Either way the record applies as any.
func TestReplicaIDConflict(t *testing.T) {
	var logs strings.Builder
	h := sharesHarness(t, Options{SharesEpoch: 1000, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	conflicts := func(want float64) {
		t.Helper()
		h.wantCount("pdrouter_statestore_replica_id_conflicts_total", nil, want)
	}
	conflicts(0)
	// An earlier run's snapshots, read at open: not counted.
	h.put(shareReplica, sharesOf(shareReplica, 400, shareT0, shr("w2", 2, 1, 0, 0, 0)))
	h.put(shareReplica, sharesOf(shareReplica, 2000, shareT0, shr("w2", 0, 0, 0, 0, 0)))
	h.put("w1", ownDecision(shareReplica, "d1", "w1", "", shareT0, 16))
	own := h.take()
	h.put(shareReplica, own)
	conflicts(0)
	// A twin started later (a larger epoch), and one started earlier.
	h.put(shareReplica, sharesOf(shareReplica, own.GetSeq()+5_000_000, shareT0+sec, shr("w3", 1, 1, 0, 0, 0)))
	conflicts(1)
	h.put(shareReplica, sharesOf(shareReplica, 700, shareT0+sec, shr("w3", 1, 1, 0, 0, 0)))
	conflicts(2)
	if !strings.Contains(logs.String(), "another replica writes load shares under this replica's --replica-id") {
		t.Fatalf("no error logged:\n%s", logs.String())
	}
	// A snapshot taken and never written, then one written: its own. A
	// second copy of it: its own too.
	h.put("w1", ownDecision(shareReplica, "d2", "w1", "", shareT0+2*sec, 16))
	lost := h.take()
	h.put("w1", ownDecision(shareReplica, "d3", "w1", "", shareT0+3*sec, 16))
	next := h.take()
	if lost.GetSeq() >= next.GetSeq() {
		t.Fatalf("seqs %d then %d", lost.GetSeq(), next.GetSeq())
	}
	h.put(shareReplica, next)
	h.put(shareReplica, next)
	conflicts(2)
}

// TestOtherWriterDeltaSkipped: a load delta of another writer on the
// replica's partition is skipped and counted, its offset advances.
func TestOtherWriterDeltaSkipped(t *testing.T) {
	h := sharesHarness(t, Options{})
	if h.series("pdrouter_records_invalid_total", map[string]string{"topic": "load-deltas", "reason": reasonOtherWriter}) == nil {
		t.Fatal("no series of other_writer at start")
	}
	r := h.record("w1", ownDecision("replica-b", "d1", "w1", "", shareT0, 16))
	h.apply(r)
	h.wantActive("w1", load(0, 0, 0, 0, 0))
	if n := h.invalid(events.TopicLoadDeltas, reasonOtherWriter); n != 1 {
		t.Fatalf("other_writer: %v", n)
	}
	if next, _ := h.s.Offsets().Get(events.TopicLoadDeltas, r.Partition); next != r.Offset+1 {
		t.Fatalf("offset %d after the record at %d", next, r.Offset)
	}
	h.put("w1", ownDecision(shareReplica, "d2", "w1", "", shareT0, 16))
	if a := h.active("w1"); a.Requests != 1 {
		t.Fatalf("own decision after the skipped one: %+v", a)
	}
}

// sharesRestartLog applies to h registrations (sharesHarness), its own
// requests and its peers' snapshots, and returns the load-shares records.
func sharesRestartLog(t *testing.T, h *harness, writer string) (shares []*kgo.Record) {
	for i := range 30 {
		at := shareT0 + int64(i)*sec
		dw := fmt.Sprintf("w%d", 1+i%3)
		h.put(dw, ownDecision(writer, fmt.Sprintf("%s-%d", writer, i), dw, "p1", at, uint32(16+i)))
		if i%3 == 0 {
			h.put(dw, ownEnd(writer, fmt.Sprintf("%s-%d", writer, i), dw, at+sec/2))
		}
		peer := []string{"b", "c"}[i%2]
		r := h.record(peer, sharesOf(peer, uint64(i+1), at, shr(dw, uint64(i), 1, 10, 1, 0)))
		shares = append(shares, r)
		h.apply(r)
	}
	return shares
}

// TestSharesRestart: a store of load shares never stores the load-shares
// offsets; reopened, cleanly or after a crash, it reads the topic from its
// start again and reaches the digest (shared and private) and the view it
// had; and it refuses to open as a store of another writer or source.
// The same whether it holds its own requests as facts or as open requests
// (PeerSums: then it also reads its own deltas since their checkpoint
// again).
func TestSharesRestart(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprintf("open=%v", open), func(t *testing.T) { testSharesRestart(t, open) })
	}
}

func testSharesRestart(t *testing.T, open bool) {
	h := sharesHarness(t, Options{PeerSums: open})
	shares := sharesRestartLog(t, h, shareReplica)
	var deltas []*kgo.Record
	for _, r := range h.log {
		if r.Topic == (events.Names{}).Physical(events.TopicLoadDeltas) {
			deltas = append(deltas, r)
		}
	}
	want := h.digest()
	views := map[string]decider.ActiveLoad{}
	for _, id := range []string{"w1", "w2", "w3", "p1"} {
		views[id] = h.active(id)
	}
	if views["w1"].Requests == 0 {
		t.Fatal("w1 has no load")
	}
	for _, o := range h.s.CommittedOffsets() {
		if o.Topic == events.TopicLoadShares {
			t.Fatalf("committed offsets name load-shares: %s", h.s.CommittedOffsets())
		}
	}
	check := func(s *Store, how string) {
		t.Helper()
		if _, ok := s.Offsets().Get(events.TopicLoadShares, shares[0].Partition); ok {
			t.Fatalf("%s: the reopened store has load-shares offsets: %s", how, s.Offsets())
		}
		applyIn(t, s, readAgain(s, deltas), 3)
		applyIn(t, s, shares, 4)
		got, err := s.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if got.Hash != want.Hash || got.Private != want.Private {
			t.Fatalf("%s: digest %x/%x, want %x/%x", how, got.Hash, got.Private, want.Hash, want.Private)
		}
		x := &harness{t: t, s: s}
		for id, a := range views {
			x.wantActive(id, a)
		}
	}
	check(crashed(t, h, h.opts), "crashed")
	h.reopen()
	check(h.s, "reopened")

	dir := h.dir
	if err := h.s.Close(); err != nil {
		t.Fatal(err)
	}
	h.s = nil
	for _, o := range []Options{
		{Source: SourceLoadShares, ReplicaID: "replica-b"},
		{Source: SourceLoadDeltas},
		{},
	} {
		if s, err := Open(dir, o); !errors.Is(err, ErrWrongSource) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("opened as %s %q: %v, want ErrWrongSource", o.Source, o.ReplicaID, err)
		}
	}
	if _, err := Open(dir, Options{Source: SourceLoadShares}); err == nil {
		t.Fatal("opened a store of load shares without a replica id")
	}
	s, err := Open(dir, Options{Source: SourceLoadShares, ReplicaID: "replica-b", RebuildOtherSource: true, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if offs := s.Offsets(); len(offs) != 0 {
		t.Fatalf("rebuilt for another writer with offsets %s", offs)
	}
}

// TestSharesStoreOfOtherSource: a store of load deltas, opened for load
// shares, is refused (it holds every writer's requests).
func TestSharesStoreOfOtherSource(t *testing.T) {
	h := newHarnessWith(t, 4, Options{Source: SourceLoadDeltas})
	h.put("w1", registration("w1", pb.Pool_POOL_DECODE, 16, 0))
	h.put("w1", ownDecision(shareReplica, "d1", "w1", "", shareT0, 16))
	if err := h.s.Close(); err != nil {
		t.Fatal(err)
	}
	h.s = nil
	s, err := Open(h.dir, Options{Source: SourceLoadShares, ReplicaID: shareReplica})
	if !errors.Is(err, ErrWrongSource) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("a store of load deltas opened for load shares: %v", err)
	}
}

// TestSharesDigestIgnoresOwnRequests: two replicas at equal offsets of
// the shared topics have the same digest whatever their own requests; their
// private digests differ.
func TestSharesDigestIgnoresOwnRequests(t *testing.T) {
	a := sharesHarness(t, Options{})
	b := sharesHarness(t, Options{ReplicaID: "replica-b"})
	sharesRestartLog(t, a, shareReplica)
	sharesRestartLog(t, b, "replica-b")
	da, db := a.digest(), b.digest()
	if da.Hash != db.Hash {
		t.Fatalf("shared digests differ: %x and %x", da.Hash, db.Hash)
	}
	if da.Private == db.Private {
		t.Fatal("private digests agree on different requests")
	}
	// A store of another source keeps one digest of everything.
	if d := newHarness(t, 1).digest(); d.Private != ([16]byte{}) {
		t.Fatalf("a private digest for a store of decisions: %x", d.Private)
	}
}
