package statestore

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// A writer's snapshots (docs/scaling.md, "Load shares"). With SourceLoadShares a replica's store holds its own
// requests exactly (its own partition of load-deltas and the decisions it
// recorded locally) and its peers' load as rows of their snapshots
// (sharerows.go). The group commit asks it, once per commit, for the
// snapshot of the workers whose own share changed (TakeShares), appends it
// on load-shares keyed by the replica, and hands back a snapshot it could
// not write (SharesNotSent), so that its workers go again with the next
// one.
//
// Invariants, kept here:
//
//   - A slot's own share is its six aggregates (activeDistinct+activeExtra,
//     activeRequests, prefillTokens, recentRequests, recentLocal), which
//     change only in setContribution and setRecent (active.go, open.go's
//     requests go through them too); both call shareChanged, so a slot
//     whose share changed is in the dirty set until a snapshot takes it.
//   - A slot is sent when its share differs from the one it last sent
//     (slotState.sent), or when sent is void: the snapshot carrying it was
//     not written (SharesNotSent) or its nonzero share was last sent
//     ActiveExpiry/2 of the store's clock ago (keepalive: a peer drops a
//     row ActiveExpiry after its clock). A zero share is sent too, so that
//     peers drop the row; a slot whose last sent share is nonzero is not
//     freed (freeQueued) until a zero one is sent.
//   - Seqs are never reused: each snapshot taken gets the next, written or
//     not, and a snapshot of this writer read from the log moves the next
//     seq past its own (a store rebuilt with an old epoch).
//   - Another process under this replica's id is told from this one by the
//     seqs (readOwn): this writer's snapshots come back in the order it
//     took them (one partition, one producer), so once one has come back,
//     a record under its id that is not the next one it took is another
//     writer's. Before that, such records are an earlier run of this
//     replica, read again at open. It only counts (a process-local fact,
//     never state): two writers of one id still apply like one.

// ownShares is the writer side of a store of SourceLoadShares.
type ownShares struct {
	// dirty: slots with slotState.shareDirty set, in the order they
	// became dirty (taken sorted by worker).
	dirty []int32
	// resend: (worker, rank)s of an unsent snapshot whose slot is gone:
	// their zero share goes again.
	resend []workerRank
	next   uint64
	// inflight: the shares of the snapshots taken and neither
	// acknowledged (SharesSent) nor handed back (SharesNotSent) yet.
	inflight int
	// keepAt: the earliest store clock a nonzero share sent is due again
	// (0: none sent).
	keepAt  int64
	changed chan struct{}
	// ended: the decision ids of this writer's requests that ended, whose
	// latency samples go with the next snapshots (sharesamples.go).
	ended   []string
	samples sampleBudget
	// issued: the seqs of the snapshots taken and not read back yet, in
	// the order they were taken (at most maxIssued; lostBelow: every seq
	// dropped past that bound is at or below it). readBack: one has come
	// back. Kept by readOwn.
	issued    []uint64
	lostBelow uint64
	readBack  bool
	lastBack  uint64 // the seq that came back last: a copy of it is no other writer's
}

// maxIssued bounds ownShares.issued: a store that took this many snapshots
// and read none back (its materializer stalled) forgets the oldest half.
const maxIssued = 1 << 16

// took records that a snapshot of seq was taken.
func (o *ownShares) took(seq uint64) {
	if len(o.issued) >= maxIssued {
		half := len(o.issued) / 2
		o.lostBelow = o.issued[half-1]
		o.issued = append(o.issued[:0], o.issued[half:]...)
	}
	o.issued = append(o.issued, seq)
}

// readOwn is called with the seq of each record under this replica's id
// read from the log, and reports whether another writer wrote it: a seq
// this store did not take, read after one it did take came back. Seqs
// taken before seq and not read back were never written.
func (o *ownShares) readOwn(seq uint64) (foreign bool) {
	i := 0
	for i < len(o.issued) && o.issued[i] < seq {
		i++
	}
	if i < len(o.issued) && o.issued[i] == seq {
		o.issued = o.issued[i+1:]
		o.readBack, o.lastBack = true, seq
		return false
	}
	o.issued = o.issued[i:]
	return o.readBack && seq != o.lastBack && seq > o.lostBelow
}

func newOwnShares(epoch uint64) *ownShares {
	return &ownShares{next: epoch + 1, changed: make(chan struct{}, 1)}
}

// sentShare is a slot's share as last taken by a snapshot. valid is false
// when it must be sent whatever it is.
type sentShare struct {
	c     shareCounts
	at    int64
	valid bool
}

// shareChanged marks slot's own share as changed.
func (st *state) shareChanged(slot int32) {
	o := st.own
	if o == nil || slot < 0 {
		return
	}
	ws := st.workers[slot]
	if ws.shareDirty {
		return
	}
	ws.shareDirty = true
	o.dirty = append(o.dirty, slot)
	if len(o.dirty) == 1 && len(o.resend) == 0 {
		o.signal()
	}
}

// advance moves the next seq on by one, but never past the largest: a seq
// wrapped to 0 is refused by every reader, where one repeated at the
// largest is only stale.
func (o *ownShares) advance() {
	if o.next < math.MaxUint64 {
		o.next++
	}
}

func (o *ownShares) signal() {
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

// ownCounts is a slot's own share.
func ownCounts(ws *slotState) shareCounts {
	return shareCounts{ws.activeDistinct + ws.activeExtra, ws.activeRequests, ws.prefillTokens, ws.recentRequests, ws.recentLocal}
}

// shareOf is the WorkerShare of counts, each clamped to the record's
// bounds (a count below zero cannot happen; it would be sent as zero).
func shareOf(wr workerRank, c shareCounts) *pb.WorkerShare {
	clamp := func(x, hi int64) int64 { return min(max(x, 0), hi) }
	s := &pb.WorkerShare{
		Worker:            &pb.WorkerRef{WorkerId: wr.id, DpRank: wr.rank},
		DecodeBlocks:      uint64(clamp(c[cBlocks], events.MaxShareCount)),
		Requests:          uint32(clamp(c[cRequests], math.MaxUint32)),
		PrefillTokens:     uint64(clamp(c[cPrefill], events.MaxShareCount)),
		RecentDecisions:   uint32(clamp(c[cRecentDecisions], math.MaxUint32)),
		RecentLocalTokens: uint64(clamp(c[cRecentLocal], events.MaxShareCount)),
	}
	// The record's rules: blocks belong to requests, local tokens to
	// recent decisions.
	if s.Requests == 0 {
		s.DecodeBlocks = 0
	}
	if s.RecentDecisions == 0 {
		s.RecentLocalTokens = 0
	}
	return s
}

// TakeShares returns the snapshot to append with the next group commit: the
// replica's own share of each worker whose share changed since the last
// snapshot taken, or that is due to be repeated, with the next sequence
// number and the store's clock. nil: nothing to send, or the store does not
// keep load shares.
func (s *Store) TakeShares() *pb.LoadShares {
	if s.opts.Source != SourceLoadShares {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.st.takeShares(s.opts.ReplicaID)
	// The samples it took: the one count takeShares moves, which apply
	// would otherwise add only with its next chunk.
	if n := s.st.stats.samplesSent; n > 0 {
		s.met.latencySamples[samplesSentIdx].Add(float64(n))
		s.st.stats.samplesSent = 0
	}
	return out
}

// takeShares is TakeShares under the write lock.
func (st *state) takeShares(writer string) *pb.LoadShares {
	o := st.own
	clock := st.reqNow
	if o == nil || clock <= 0 {
		return nil
	}
	st.keepalive(clock)
	if len(o.dirty) == 0 && len(o.resend) == 0 && len(o.ended) == 0 {
		return nil
	}
	type item struct {
		wr   workerRank
		slot int32 // -1: a resent zero share without a slot
	}
	items := make([]item, 0, len(o.dirty)+len(o.resend))
	for _, slot := range o.dirty {
		ws := st.workers[slot]
		if ws.sent.valid && ws.sent.c == ownCounts(ws) {
			ws.shareDirty = false // back to what peers hold
			continue
		}
		items = append(items, item{ws.wr, slot})
	}
	for _, wr := range o.resend {
		if slot, ok := st.lookupSlot(wr.id, wr.rank); ok {
			if ws := st.workers[slot]; !ws.shareDirty {
				ws.shareDirty = true
				items = append(items, item{wr, slot})
			}
			continue
		}
		items = append(items, item{wr, -1})
	}
	// By worker, never by slot or map order; a worker of a resent zero
	// share may be listed twice (resent twice): once is enough.
	slices.SortFunc(items, func(a, b item) int {
		if c := cmp.Compare(a.wr.id, b.wr.id); c != 0 {
			return c
		}
		return cmp.Compare(a.wr.rank, b.wr.rank)
	})
	items = slices.CompactFunc(items, func(a, b item) bool { return a.wr == b.wr })
	take, rest := items, []item(nil)
	if len(take) > events.MaxShareWorkers {
		take, rest = items[:events.MaxShareWorkers], items[events.MaxShareWorkers:]
	}
	o.dirty, o.resend = o.dirty[:0], o.resend[:0]
	for _, it := range rest {
		if it.slot >= 0 {
			o.dirty = append(o.dirty, it.slot) // still shareDirty
		} else {
			o.resend = append(o.resend, it.wr)
		}
	}
	if len(rest) > 0 {
		o.signal() // the writer comes back for them
	}
	samples := st.takeSamples()
	if len(take) == 0 && len(samples) == 0 {
		return nil
	}
	out := &pb.LoadShares{WriterId: writer, Seq: o.next, ClockUnixNano: clock, Samples: samples}
	if len(take) > 0 {
		out.Shares = make([]*pb.WorkerShare, len(take))
	}
	o.took(o.next)
	o.advance()
	for i, it := range take {
		var c shareCounts
		if it.slot >= 0 {
			ws := st.workers[it.slot]
			c = ownCounts(ws)
			ws.shareDirty = false
			ws.sent = sentShare{c: c, at: clock, valid: true}
			if c != (shareCounts{}) && (o.keepAt == 0 || clock+st.act.cfg.expiry/2 < o.keepAt) {
				o.keepAt = clock + st.act.cfg.expiry/2
			}
			if c == (shareCounts{}) {
				// Peers drop the row: a slot of an id nobody registered,
				// kept for this share, may go (freeQueued, next chunk).
				st.freeIfUnregistered(it.slot)
			}
		}
		out.Shares[i] = shareOf(it.wr, c)
	}
	o.inflight += len(out.Shares)
	return out
}

// keepalive voids the sent share of every slot whose nonzero share was
// last sent ActiveExpiry/2 ago, and marks it dirty, so peers do not drop
// its row. It scans the slots only when one is due.
func (st *state) keepalive(clock int64) {
	o := st.own
	if o.keepAt == 0 || clock < o.keepAt {
		return
	}
	half := st.act.cfg.expiry / 2
	o.keepAt = 0
	for slot, ws := range st.workers {
		if ws.freed || !ws.sent.valid || ws.sent.c == (shareCounts{}) {
			continue
		}
		if ws.sent.at+half <= clock {
			ws.sent.valid = false
			st.shareChanged(int32(slot))
		} else if o.keepAt == 0 || ws.sent.at+half < o.keepAt {
			o.keepAt = ws.sent.at + half
		}
	}
}

// SharesSent says that a snapshot TakeShares returned is on the log.
func (s *Store) SharesSent(ls *pb.LoadShares) {
	if s.opts.Source != SourceLoadShares || ls == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.own.landed(ls)
}

// landed takes a snapshot's shares out of the ones in flight.
func (o *ownShares) landed(ls *pb.LoadShares) {
	o.inflight = max(o.inflight-len(ls.GetShares()), 0)
}

// unsentShares is pdrouter_statestore_share_unsent_workers: the workers
// whose share changed since the last snapshot taken, and the shares of the
// snapshots in flight. A worker in both counts twice: what matters is
// whether it is 0, when every share this writer changed is on the log.
func (s *Store) unsentShares() float64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	o := s.st.own
	return float64(len(o.dirty) + len(o.resend) + o.inflight)
}

// SharesNotSent hands back a snapshot TakeShares returned that was not
// written: its workers are sent again, with their share as it is then, in
// the next snapshot (with a new seq: seqs are never reused).
func (s *Store) SharesNotSent(ls *pb.LoadShares) {
	if s.opts.Source != SourceLoadShares || ls == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	o := st.own
	o.landed(ls)
	wasEmpty := len(o.dirty) == 0 && len(o.resend) == 0 && len(o.ended) == 0
	st.samplesNotSent(ls.GetSamples())
	for _, e := range ls.GetShares() {
		wr := workerRank{e.GetWorker().GetWorkerId(), e.GetWorker().GetDpRank()}
		slot, ok := st.lookupSlot(wr.id, wr.rank)
		if !ok {
			wr.id = strings.Clone(wr.id) // not the caller's record
			o.resend = append(o.resend, wr)
			continue
		}
		ws := st.workers[slot]
		ws.sent.valid = false
		if !ws.shareDirty {
			ws.shareDirty = true
			o.dirty = append(o.dirty, slot)
		}
	}
	if wasEmpty && (len(o.dirty) > 0 || len(o.resend) > 0 || len(o.ended) > 0) {
		o.signal()
	}
}

// SharesChanged is signalled (without blocking; it holds at most one
// signal) when an own share changes, so that a writer with no append
// queued still sends its snapshot. nil when the store keeps no load shares.
func (s *Store) SharesChanged() <-chan struct{} {
	if s.opts.Source != SourceLoadShares {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.st.own.changed
}

// logReplicaIDConflicts logs records of another writer under this
// replica's id (readOwn), at most once every conflictLogEvery: they come
// with every snapshot of the other writer. The metric counts each.
func (s *Store) logReplicaIDConflicts(n int64) {
	if n == 0 {
		return
	}
	s.conflicts += n
	if now := time.Now(); now.Sub(s.conflictLogged) >= conflictLogEvery {
		s.log.Error("statestore: another replica writes load shares under this replica's --replica-id: give every replica of the group its own id (peers see the two replicas' shares replace each other, and each misses the other's load)",
			"replica_id", s.opts.ReplicaID, "records", s.conflicts)
		s.conflictLogged, s.conflicts = now, 0
	}
}

// conflictLogEvery spaces logReplicaIDConflicts' lines.
const conflictLogEvery = time.Minute
