package statestore

import (
	"container/heap"
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Decision records, for the idempotent request_id of POST /v1/route,
// GET /v1/decisions/{id} and the lifecycle events (api.md).
//
// Where a record is served from, in the order a lookup tries:
//
//  1. local: this replica's own decisions (RecordLocalDecision), at once,
//     until the log copy is applied (then the log copy serves) or
//     Options.MaxLocalDecisions newer ones push it out. Memory only: never
//     in Pebble or the digest, so the state stays a function of the log.
//  2. pending: decisions applied since the last Pebble commit. Readers see
//     a chunk as soon as it is applied (Options.ChunkRecords) but Pebble
//     only when the whole Apply batch commits, so these bridge the gap: a
//     caller that waited for an offset (WaitApplied) finds every decision
//     below it. Cleared after each commit; bounded by the batch, whose
//     records the caller holds in memory anyway. Another replica's
//     decision is held as its header's bytes (events.DecodeForApply),
//     decoded only if a lookup asks for it.
//  3. the cache: Options.DecisionCacheSize records read from Pebble or
//     committed last (another replica's still as bytes until asked for),
//     least recently used out first.
//  4. Pebble, keys 'd' (the record's header and its position on the
//     decisions topic), 'q' (request → decision ids) and 'e' (time →
//     decision id, for the sweep), written in the same batch as the
//     offsets (invariant 2). They are part of the state and the digest:
//     they are a function of the log (the header is this replica's own
//     record re-marshalled deterministically, or another replica's record
//     less its table and chains, the same bytes for any record pdrouter
//     writes; the position is the record's) and two replicas
//     must agree on which requests already have a decision, or a retried
//     request would be decided twice on one of them. A store of open
//     requests (Options.PeerSums) writes none of these keys: its index is
//     the open requests it holds, in memory (openindex.go).
//
// Only the first two sources hold whole records, and only of this
// replica's own decisions. Pebble keeps the header
// (events.MarshalDecisionHeader: no candidate table, and hash chains only
// in approximate mode, whose predictions are rebuilt from them at Open):
// the table and chains are ~97% of a record's bytes, and storing them made
// every replica rewrite ~26 KB per decision through Pebble's flushes and
// compactions (a quarter of a busy router's CPU) and fill its disk at
// rate × retention × 26 KB. Whoever needs the whole record (GET
// /v1/decisions, explain) reads it from the decisions topic at the stored
// position (StoredDecision).
//
// Memory is therefore bounded by MaxLocalDecisions + one Apply batch +
// DecisionCacheSize headers, whatever the retention, and the request
// filter (reqfilter.go): ~10 bits per decision in retention, 128 MiB at
// most.
//
// Retention, by event time: a decision is present iff it was seen and
// decided_at + DecisionRetention > reqNow (the clock of decisions and
// outcomes, state.go). Like the active facts (active.go), a decision that
// arrives already absent is not written, and the sweep deletes the others
// when the clock passes them, so the keyspace depends only on the set of
// decisions seen and on reqNow, never on the order or batching of apply.
// Lookups apply the same test, so a record kept a little longer (the cache,
// a sweep not committed yet) is never served after its time.
//
// Decision ids are unique (the API makes one per decision); a record
// delivered twice is byte-identical. A copy at the same position rewrites
// the same keys; a copy at another position, maybe on another partition,
// which replicas read in different orders, is kept only if its position is
// lower than the one held (appliedAt): the invariant is that the stored
// decision names the lowest position of its id, a function of the set of
// copies read. Two different records under one id (forged) are the one
// case left to read order (design.md, invariant 1).
//
// Canonical decision of a request: if replicas raced on one request id
// (each deciding before seeing the other's decision), the decision with the
// lowest decision id (byte order) is the request's, on every replica.

type decisionLog struct {
	pending    map[string]pendingDecision
	pendingReq map[string][]string // request id → pending decision ids
	pendingDue decisionHeap        // pending decisions by event time, for the sweep

	// nextExpiry: no stored or pending decision leaves before this time
	// (reqNow), so the sweep has nothing to do until then. MinInt64 at
	// Open: unknown, sweep once to learn it.
	nextExpiry int64
	// sweepFrom: every committed 'e' key below it has been deleted in the
	// current batch or before, so the sweep's scan starts there.
	sweepFrom []byte

	local    map[string]*pb.DecisionRecord
	localReq map[string][]string // request id → local decision ids
	localQ   []string            // local decision ids in arrival order; ids no longer local are skipped
	// localValue: the record value that was appended to the log, for the
	// local decisions whose caller gave it (RecordLocalDecisionAt). A log
	// record with these exact bytes is this record: Apply then uses it
	// instead of decoding (apply.go prepare).
	localValue map[string][]byte

	// reqs: the request ids the request index may hold (reqfilter.go).
	reqs *requestFilter
}

func newDecisionLog(retention int64) *decisionLog {
	return &decisionLog{
		pending: map[string]pendingDecision{}, pendingReq: map[string][]string{},
		local: map[string]*pb.DecisionRecord{}, localReq: map[string][]string{}, localValue: map[string][]byte{},
		nextExpiry: math.MinInt64, reqs: newRequestFilter(retention),
	}
}

// addSat is a+b without overflow (event times are unvalidated int64s).
func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// decisionPresent is the retention test, the same on every path.
func (st *state) decisionPresent(d *pb.DecisionRecord) bool {
	return addSat(d.GetDecidedAtUnixNano(), st.act.cfg.decisionRetention) > st.reqNow
}

// applyDecisionLog is the apply rule of a decision record for lookups
// (and, in approximate mode, its predicted cache entries, approx.go).
// partition and offset are the record's position on the decisions topic.
// header, when not nil, is the record's header as events.DecodeForApply
// gives it (d then holds only what the apply rules read): it is stored as
// it is, and lookups decode it.
func (st *state) applyDecisionLog(b *pebble.Batch, d *pb.DecisionRecord, partition int32, offset int64, header []byte) {
	st.decisionLogFact(b, d, partition, offset, header, storedDecisionFormat)
}

// applyDeltaDecisionLog is applyDecisionLog for a decision learnt from a
// load delta at (partition, offset) of the load-deltas topic: d is what
// recordOfDelta made of the entry, and the store keeps its header, which
// names the decision, its request and its workers, but neither its table
// nor its position on the decisions topic. Lookups serve it with
// Partition -1; whoever needs the whole record finds it on the decisions
// topic by its decode worker and decided_at (api, wholeDecision).
func (st *state) applyDeltaDecisionLog(b *pebble.Batch, d *pb.DecisionRecord, partition int32, offset int64) {
	header, err := events.AppendDecisionHeader(st.hbuf[:0], d, false)
	if err != nil {
		return // unreachable: the entry's strings were validated
	}
	st.hbuf = header
	st.decisionLogFact(b, d, partition, offset, header, storedDeltaFormat)
}

// decisionLogFact stores a decision for lookups; format says what its
// position is a position of (storedDecisionFormat, storedDeltaFormat).
func (st *state) decisionLogFact(b *pebble.Batch, d *pb.DecisionRecord, partition int32, offset int64, header []byte, format byte) {
	dl := st.dec
	id, req := d.GetDecisionId(), d.GetRequestId()
	st.dropLocalDecision(id) // read back: the log copy serves from now on
	if !st.decisionPresent(d) {
		return // already absent: the same as seen, then swept
	}
	if p, o, ok := st.appliedAt(id, req); ok {
		if p != partition || o != offset {
			st.stats.decisionCopies++
		}
		if !positionBefore(partition, offset, p, o) {
			return // a copy at a lower position is the one kept
		}
	}
	var v []byte
	if header != nil {
		v = append(appendStoredPosition(st.dbuf[:0], format, partition, offset), header...)
	} else {
		var err error
		if v, err = appendStoredDecision(st.dbuf[:0], partition, offset, d, st.act.cfg.approxTTL > 0); err != nil {
			return // unreachable: a decoded message has valid UTF-8
		}
	}
	st.dbuf = v // Set copies it
	tD := d.GetDecidedAtUnixNano()
	dl.reqs.add(req, tD, 0) // before the key: the filter's invariant
	_ = b.Set(decisionKey(id), v, nil)
	_ = b.Set(requestKey(req, id), requestIndexValue(d), nil)
	_ = b.Set(expiryKey(tD, id), []byte(req), nil)
	if _, ok := dl.pending[id]; !ok {
		dl.pendingReq[req] = append(dl.pendingReq[req], id)
		heap.Push(&dl.pendingDue, decisionDue{at: tD, id: id})
	}
	dl.nextExpiry = min(dl.nextExpiry, addSat(tD, st.act.cfg.decisionRetention))
	st.predictDecision(d)
	if header == nil {
		dl.pending[id] = pendingDecision{sd: inMemory(d), partition: partition, offset: offset}
		return
	}
	// The chain active accounting keeps is its own slice: the rest of d
	// can go.
	served := StoredDecision{Record: &pb.DecisionRecord{DecisionId: id, RequestId: req, DecidedAtUnixNano: tD}, Partition: partition, Offset: offset}
	if format == storedDeltaFormat {
		served.Partition, served.Offset = -1, -1
		header = slices.Clone(header) // made in a buffer the next one reuses
	}
	dl.pending[id] = pendingDecision{
		sd:        served,
		header:    header,
		partition: partition, offset: offset,
	}
}

// appliedAt returns the position of the copy of decision id this state
// holds, pending or committed, if it holds one. The committed copy is
// looked for only when the request filter says request id req may be
// indexed: nearly every decision applied is new, and costs no Pebble read.
//
// Why positions: a decision id may appear at more than one position of the
// decisions topic (an append retried under another key, a record copied by
// a mirror or a hostile writer), on different partitions, which replicas
// read interleaved in different orders. The copy kept, and the position
// lookups serve and read the whole record back from, is the one at the
// lowest (partition, offset): a function of the set of copies seen, never
// of the order they were read in (design.md, invariant 1). Active
// accounting keeps the same position (active.go applyDecision).
func (st *state) appliedAt(id, req string) (int32, int64, bool) {
	if p, ok := st.dec.pending[id]; ok {
		return p.partition, p.offset, true
	}
	if indexed, _ := st.dec.reqs.lookup(req); !indexed || st.storedAt == nil {
		return 0, 0, false
	}
	return st.storedAt(id)
}

// positionBefore reports whether (p1, o1) comes before (p2, o2).
func positionBefore(p1 int32, o1 int64, p2 int32, o2 int64) bool {
	return p1 < p2 || p1 == p2 && o1 < o2
}

// storedDecisionAt returns the position of the committed decision id.
// Called with mu held (Apply), so it takes dbMu after it.
func (s *Store) storedDecisionAt(id string) (int32, int64, bool) {
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	if s.db == nil {
		return 0, 0, false
	}
	v, closer, err := s.db.Get(decisionKey(id))
	if err != nil {
		return 0, 0, false
	}
	defer closer.Close()
	p, off, _, err := decodeStoredPosition(v)
	return p, off, err == nil
}

// pendingDecision is a decision applied and not committed yet: this
// replica's own, whole record, or another replica's, whose header is
// decoded when a lookup needs it: most are never looked up on this
// replica.
type pendingDecision struct {
	// sd is the whole record, or (with header) a record of the decision
	// id, request id and decided_at only, and the position.
	sd     StoredDecision
	header []byte
	// partition and offset: the record's position on the decisions topic
	// (sd has -1 for a whole record, which lookups serve from memory).
	partition int32
	offset    int64
}

// lookup returns what a lookup serves: the whole record, or the header
// and position, as Pebble serves them after the commit.
func (p pendingDecision) lookup() (StoredDecision, bool) {
	if p.header == nil {
		return p.sd, p.sd.Record != nil
	}
	d := &pb.DecisionRecord{}
	if err := proto.Unmarshal(p.header, d); err != nil {
		return StoredDecision{}, false // unreachable: the header was checked when applied
	}
	return StoredDecision{Record: d, Partition: p.sd.Partition, Offset: p.sd.Offset}, true
}

func deleteDecisionKeys(b *pebble.Batch, tD int64, id, req string) {
	_ = b.Delete(decisionKey(id), nil)
	_ = b.Delete(requestKey(req, id), nil)
	_ = b.Delete(expiryKey(tD, id), nil)
}

func removeID(ids []string, id string) []string {
	if i := slices.Index(ids, id); i >= 0 {
		return slices.Delete(ids, i, i+1)
	}
	return ids
}

func (dl *decisionLog) dropPending(id string) {
	d := dl.pending[id].sd.Record
	if d == nil {
		return
	}
	delete(dl.pending, id)
	if ids := removeID(dl.pendingReq[d.GetRequestId()], id); len(ids) == 0 {
		delete(dl.pendingReq, d.GetRequestId())
	} else {
		dl.pendingReq[d.GetRequestId()] = ids
	}
}

// committed forgets the pending decisions: Pebble serves them now, and the
// cache keeps the whole decoded records (so a lookup of a recent decision
// needs no read of the log either). Why the cache: lifecycle events follow
// their decision closely (prefill_done within a second, short requests'
// completed soon after), and each would otherwise read the record back
// from Pebble and decode it again. Called after the batch that wrote them
// committed.
func (dl *decisionLog) committed(cache *decisionCache) {
	for _, due := range dl.pendingDue {
		if p := dl.pending[due.id]; p.sd.Record != nil {
			cache.putPending(due.id, p)
		}
	}
	clear(dl.pending)
	clear(dl.pendingReq)
	dl.pendingDue = dl.pendingDue[:0]
}

// sweepDecisions deletes the decisions whose retention ended by reqNow,
// committed ones (scanning 'e' in time order from sweepFrom) and pending
// ones. It runs at the end of each chunk, with the other sweeps.
func (s *Store) sweepDecisions(b *pebble.Batch) {
	st := s.st
	dl, ret, now := st.dec, st.act.cfg.decisionRetention, st.reqNow
	dl.reqs.sweep(now)
	if now < dl.nextExpiry {
		return
	}
	next := int64(math.MaxInt64)
	if s.db != nil {
		lower := []byte{famExpiry}
		if dl.sweepFrom != nil {
			lower = slices.Clone(dl.sweepFrom)
		}
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: []byte{famExpiry + 1}})
		if err == nil {
			for it.First(); it.Valid(); it.Next() {
				tD, id, err := parseExpiryKey(it.Key())
				if err != nil {
					continue
				}
				if end := addSat(tD, ret); end > now {
					next = end
					break
				}
				deleteDecisionKeys(b, tD, id, string(it.Value()))
				dl.dropPending(id) // a re-delivery of it in this batch goes too
				dl.sweepFrom = append(append(dl.sweepFrom[:0], it.Key()...), 0)
			}
			_ = it.Close()
		}
	}
	for len(dl.pendingDue) > 0 && addSat(dl.pendingDue[0].at, ret) <= now {
		it := heap.Pop(&dl.pendingDue).(decisionDue)
		if d := dl.pending[it.id].sd.Record; d != nil && d.GetDecidedAtUnixNano() == it.at {
			deleteDecisionKeys(b, it.at, it.id, d.GetRequestId())
			dl.dropPending(it.id)
		}
	}
	if len(dl.pendingDue) > 0 {
		next = min(next, addSat(dl.pendingDue[0].at, ret))
	}
	dl.nextExpiry = next
}

// recordLocalDecision keeps one of this replica's decisions for lookups
// until the log copy is applied. The caller checked that it was not
// applied already. value is the record's bytes on the log, when known.
func (st *state) recordLocalDecision(d *pb.DecisionRecord, value []byte) {
	dl := st.dec
	id := d.GetDecisionId()
	if _, ok := dl.local[id]; ok || !st.decisionPresent(d) {
		return
	}
	dl.local[id] = d
	if value != nil {
		dl.localValue[id] = value
	}
	dl.localReq[d.GetRequestId()] = append(dl.localReq[d.GetRequestId()], id)
	dl.localQ = append(dl.localQ, id)
	for len(dl.local) > st.act.cfg.maxLocal && len(dl.localQ) > 0 {
		// The bound: the oldest goes. It is served again once read back.
		old := dl.localQ[0]
		dl.localQ = dl.localQ[1:]
		st.dropLocalDecision(old)
	}
	st.predictDecision(d)
}

func (st *state) dropLocalDecision(id string) {
	dl := st.dec
	d := dl.local[id]
	if d == nil {
		return
	}
	delete(dl.local, id)
	delete(dl.localValue, id)
	if ids := removeID(dl.localReq[d.GetRequestId()], id); len(ids) == 0 {
		delete(dl.localReq, d.GetRequestId())
	} else {
		dl.localReq[d.GetRequestId()] = ids
	}
}

// sweepLocalDecisions trims the arrival queue: ids read back or expired at
// its front go, and the queue is compacted when mostly stale, so it stays
// within twice the local decisions held (plus a constant).
func (st *state) sweepLocalDecisions() {
	dl := st.dec
	for len(dl.localQ) > 0 {
		d := dl.local[dl.localQ[0]]
		if d != nil && st.decisionPresent(d) {
			break
		}
		if d != nil {
			st.dropLocalDecision(dl.localQ[0])
		}
		dl.localQ = dl.localQ[1:]
	}
	if len(dl.localQ) > 64 && len(dl.localQ) > 2*len(dl.local) {
		q := make([]string, 0, len(dl.local))
		for _, id := range dl.localQ {
			if _, ok := dl.local[id]; ok {
				q = append(q, id)
			}
		}
		dl.localQ = q
	}
}

// decisionPending reports whether the log copy of decision id was applied
// and not committed yet. Called with mu held.
func (s *Store) decisionPending(id string) bool {
	_, ok := s.st.dec.pending[id]
	return ok
}

// decisionStored reports whether the log copy of decision id is committed
// to Pebble. It takes dbMu only.
func (s *Store) decisionStored(id string) bool {
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	if s.db == nil {
		return false
	}
	_, closer, err := s.db.Get(decisionKey(id))
	if err != nil {
		return false
	}
	_ = closer.Close()
	return true
}

// Decision returns the decision with this decision id: one of this
// replica's own decisions (RecordLocalDecision) at once, or any decision
// applied from the decisions topic, while its retention lasts
// (Options.DecisionRetention, event time). A committed decision comes back
// as its header and position (StoredDecision.Complete false).
func (s *Store) Decision(id string) (StoredDecision, bool) {
	sd, ok := s.decision(id)
	s.own.fill(&sd)
	return sd, ok
}

func (s *Store) decision(id string) (StoredDecision, bool) {
	s.mu.RLock()
	st := s.st
	p, ok := st.dec.pending[id]
	if d := st.dec.local[id]; d != nil {
		p, ok = pendingDecision{sd: inMemory(d)}, true
	}
	if ok {
		present := st.decisionPresent(p.sd.Record)
		s.mu.RUnlock()
		sd, ok := p.lookup()
		return sd, ok && present
	}
	if st.act.open != nil {
		// The index is the open requests (openindex.go): nothing in Pebble.
		var sd StoredDecision
		e := st.openByID(id)
		if e != nil {
			sd = e.openStored(id)
		}
		ok := e != nil && st.decisionPresent(sd.Record)
		s.mu.RUnlock()
		return sd, ok
	}
	now := st.reqNow
	s.mu.RUnlock()
	sd, ok := s.loadDecision(id)
	if !ok || addSat(sd.Record.GetDecidedAtUnixNano(), s.opts.DecisionRetention.Nanoseconds()) <= now {
		return StoredDecision{}, false
	}
	return sd, true
}

// inMemory is a whole record held in memory.
func inMemory(d *pb.DecisionRecord) StoredDecision {
	return StoredDecision{Record: d, Complete: true, Partition: -1, Offset: -1}
}

// DecisionForRequest returns the decision made for a request id: the one
// with the lowest decision id among this replica's own decisions and those
// applied from the log, so that replicas that raced on one request all
// name the same decision once they have applied the same records. As with
// Decision, a committed decision comes back as its header and position.
func (s *Store) DecisionForRequest(requestID string) (StoredDecision, bool) {
	sd, ok := s.decisionForRequest(requestID)
	s.own.fill(&sd)
	return sd, ok
}

func (s *Store) decisionForRequest(requestID string) (StoredDecision, bool) {
	mem, stored, ok := s.forRequest(requestID)
	if ok && (mem.Record == nil || stored.DecisionID < mem.Record.GetDecisionId()) {
		if sd, ok := s.loadDecision(stored.DecisionID); ok {
			return sd, true
		}
	}
	if mem.Record == nil {
		return StoredDecision{}, false
	}
	return mem, true
}

// DecisionRef names a decision and the workers it chose: what a lifecycle
// event needs of the decision it reports on.
type DecisionRef struct {
	DecisionID    string
	DecodeWorker  *pb.WorkerRef
	PrefillWorker *pb.WorkerRef // nil for a local prefill
}

// DecisionRefForRequest is DecisionForRequest without the record: the
// committed decision's workers come from its request index entry, so a
// lifecycle event reported long after its decision (when the record has
// left the records cache) costs one index seek, not a record read and
// decode. The refs are shared and read-only.
func (s *Store) DecisionRefForRequest(requestID string) (DecisionRef, bool) {
	sd, stored, ok := s.forRequest(requestID)
	mem := sd.Record
	if ok && (mem == nil || stored.DecisionID < mem.GetDecisionId()) {
		return stored, true
	}
	if mem == nil {
		return DecisionRef{}, false
	}
	return DecisionRef{DecisionID: mem.GetDecisionId(), DecodeWorker: mem.GetDecodeWorker(), PrefillWorker: mem.GetPrefillWorker()}, true
}

// forRequest finds the candidates for a request's canonical decision: the
// lowest-id present decision in memory (this replica's own, and those
// applied but not committed yet), and the first present entry of the
// request index in Pebble.
//
// The request filter (reqfilter.go), read under the same lock as the
// pending decisions, spares the Pebble seek when it can: when the index
// holds no key of the request, and when it holds at most one and that one
// is known, as a pending decision or in the records cache (a lifecycle
// event soon after its decision). Whatever a lookup then finds is what a
// seek made at that instant would have found.
func (s *Store) forRequest(requestID string) (mem StoredDecision, stored DecisionRef, storedOK bool) {
	s.mu.RLock()
	st := s.st
	var memP pendingDecision
	sawPending := false // a present pending decision: its key is in the index
	consider := func(p pendingDecision, pending bool) {
		d := p.sd.Record
		if d == nil || !st.decisionPresent(d) {
			return
		}
		sawPending = sawPending || pending
		if memP.sd.Record == nil || d.GetDecisionId() < memP.sd.Record.GetDecisionId() {
			memP = p
		}
	}
	for _, id := range st.dec.localReq[requestID] {
		if d := st.dec.local[id]; d != nil {
			consider(pendingDecision{sd: inMemory(d)}, false)
		}
	}
	for _, id := range st.dec.pendingReq[requestID] {
		consider(st.dec.pending[id], true)
	}
	if st.act.open != nil {
		st.openByRequest(requestID, func(id string, e *reqEntry) {
			consider(pendingDecision{sd: e.openStored(id)}, false)
		})
	}
	now := st.reqNow
	indexed, single := st.dec.reqs.lookup(requestID)
	var cached pendingDecision
	if indexed && single && !sawPending {
		// The cache only holds decisions whose keys were added to the
		// filter before this lock was taken (committed ones).
		cached, _ = s.cache.forRequest(requestID)
	}
	s.mu.RUnlock()
	if memP.sd.Record != nil {
		if sd, ok := memP.lookup(); ok {
			mem = sd
		}
	}
	switch {
	case !indexed, single && sawPending:
		// No key, or only the pending decision's own.
		return mem, DecisionRef{}, false
	case cached.sd.Record != nil && addSat(cached.sd.Record.GetDecidedAtUnixNano(), st.act.cfg.decisionRetention) > now:
		// The one key is the cached decision's (decoded once, if another
		// replica's).
		sd, ok := s.cache.get(cached.sd.Record.GetDecisionId())
		if !ok {
			sd, ok = cached.lookup()
		}
		if ok {
			d := sd.Record
			return mem, DecisionRef{DecisionID: d.GetDecisionId(), DecodeWorker: d.GetDecodeWorker(), PrefillWorker: d.GetPrefillWorker()}, true
		}
	}
	// Committed decisions: the first present key of the request's span is
	// the lowest decision id. Read after the memory sources: a decision
	// committed in between was either seen pending or is found here.
	stored, storedOK = s.firstStoredDecision(requestID, now)
	return mem, stored, storedOK
}

// firstStoredDecision scans the request index of requestID for the lowest
// decision id still present at now.
func (s *Store) firstStoredDecision(requestID string, now int64) (DecisionRef, bool) {
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	if s.db == nil {
		return DecisionRef{}, false
	}
	lo := requestPrefix(requestID)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return DecisionRef{}, false
	}
	defer it.Close()
	ret := s.opts.DecisionRetention.Nanoseconds()
	for it.First(); it.Valid(); it.Next() {
		tD, ref, ok := decodeRequestIndex(it.Value())
		if ok && addSat(tD, ret) > now {
			ref.DecisionID = string(it.Key()[len(lo):])
			return ref, true
		}
	}
	return DecisionRef{}, false
}

// requestIndexValue is the value of a decision's request index key: its
// decided_at (retention), then its workers (DecisionRefForRequest).
//
//	i64 decided_at | uvarint len, decode worker id | uvarint decode rank |
//	u8 has prefill | [uvarint len, prefill worker id | uvarint prefill rank]
func requestIndexValue(d *pb.DecisionRecord) []byte {
	dw, pw := d.GetDecodeWorker(), d.GetPrefillWorker()
	v := make([]byte, 0, 24+len(dw.GetWorkerId())+len(pw.GetWorkerId()))
	v = binary.LittleEndian.AppendUint64(v, uint64(d.GetDecidedAtUnixNano()))
	v = appendString(v, dw.GetWorkerId())
	v = binary.AppendUvarint(v, uint64(dw.GetDpRank()))
	if pw == nil {
		return append(v, 0)
	}
	v = append(v, 1)
	v = appendString(v, pw.GetWorkerId())
	return binary.AppendUvarint(v, uint64(pw.GetDpRank()))
}

// decodeRequestIndex reads requestIndexValue; ok is false on a value this
// version did not write.
func decodeRequestIndex(v []byte) (tD int64, ref DecisionRef, ok bool) {
	if len(v) < 8 {
		return 0, ref, false
	}
	r := reader{b: v[8:]}
	ref.DecodeWorker = &pb.WorkerRef{WorkerId: r.str(), DpRank: uint32(r.uvarint())}
	if len(r.b) > 0 && r.b[0] == 1 {
		r.b = r.b[1:]
		ref.PrefillWorker = &pb.WorkerRef{WorkerId: r.str(), DpRank: uint32(r.uvarint())}
	} else if len(r.b) > 0 && r.b[0] == 0 {
		r.b = r.b[1:]
	} else {
		r.err = errBadEntry
	}
	if r.err != nil || len(r.b) != 0 {
		return 0, DecisionRef{}, false
	}
	return int64(binary.LittleEndian.Uint64(v)), ref, true
}

// prefixEnd is the smallest key above every key starting with p.
func prefixEnd(p []byte) []byte {
	end := slices.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // no upper bound
}

// loadDecision reads a committed decision through the cache.
func (s *Store) loadDecision(id string) (StoredDecision, bool) {
	if sd, ok := s.cache.get(id); ok {
		return sd, true
	}
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	if s.db == nil {
		return StoredDecision{}, false
	}
	v, closer, err := s.db.Get(decisionKey(id))
	if err != nil {
		if !errors.Is(err, pebble.ErrNotFound) {
			s.log.Warn("statestore: reading a decision record", "decision_id", id, "err", err)
		}
		return StoredDecision{}, false
	}
	defer closer.Close()
	sd, err := decodeStoredDecision(v)
	if err != nil {
		s.log.Warn("statestore: a stored decision does not decode", "decision_id", id, "err", err)
		return StoredDecision{}, false
	}
	s.cache.put(id, sd)
	return sd, true
}

// decisionCache is a small LRU of decoded headers read from Pebble, and of
// the decisions of the last commits (another replica's as its header,
// decoded on its first lookup). Decisions are immutable per id, but for
// their position: a copy at a lower position replaces the entry when it
// commits (putPending). Lookups apply the retention test to what it
// returns.
type decisionCache struct {
	mu  sync.Mutex
	cap int
	ll  *list.List // front: most recently used; values *pendingDecision
	m   map[string]*list.Element
	// byReq: the cached decision last put of each request id.
	byReq map[string]*list.Element
}

func newDecisionCache(n int) *decisionCache {
	return &decisionCache{cap: n, ll: list.New(), m: map[string]*list.Element{}, byReq: map[string]*list.Element{}}
}

// forRequest returns the cached decision last put for request id, as it is
// held (lookup decodes it).
func (c *decisionCache) forRequest(id string) (pendingDecision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byReq[id]; e != nil {
		return *e.Value.(*pendingDecision), true
	}
	return pendingDecision{}, false
}

func (c *decisionCache) get(id string) (StoredDecision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[id]
	if e == nil {
		return StoredDecision{}, false
	}
	c.ll.MoveToFront(e)
	p := e.Value.(*pendingDecision)
	sd, ok := p.lookup()
	if ok && p.header != nil {
		*p = pendingDecision{sd: sd} // decoded once
	}
	return sd, ok
}

func (c *decisionCache) put(id string, sd StoredDecision) {
	c.putPending(id, pendingDecision{sd: sd})
}

func (c *decisionCache) putPending(id string, p pendingDecision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[id]; e != nil {
		// The same decision, maybe from a copy at a lower position
		// (appliedAt): the position served is the latest committed. A
		// forged record of another request under this id is left out, so
		// byReq keeps naming entries of their own request.
		if old := e.Value.(*pendingDecision); old.sd.Record.GetRequestId() == p.sd.Record.GetRequestId() {
			*old = p
		}
		c.ll.MoveToFront(e)
		return
	}
	e := c.ll.PushFront(&p)
	c.m[id] = e
	c.byReq[p.sd.Record.GetRequestId()] = e
	for c.ll.Len() > c.cap {
		e := c.ll.Back()
		c.ll.Remove(e)
		d := e.Value.(*pendingDecision).sd.Record
		delete(c.m, d.GetDecisionId())
		if c.byReq[d.GetRequestId()] == e {
			delete(c.byReq, d.GetRequestId())
		}
	}
}

type decisionDue struct {
	at int64
	id string
}

// decisionHeap orders by time, then id.
type decisionHeap []decisionDue

func (h decisionHeap) Len() int { return len(h) }
func (h decisionHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].id < h[j].id
}
func (h decisionHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *decisionHeap) Push(x any)   { *h = append(*h, x.(decisionDue)) }
func (h *decisionHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// StoredDecision is a decision as this replica holds it.
type StoredDecision struct {
	// Record is the decision record, shared and read-only. Unless Complete
	// it is the header only (events.MarshalDecisionHeader): no candidate
	// table, and hash chains only in approximate mode.
	Record *pb.DecisionRecord
	// Complete: Record is the whole record.
	Complete bool
	// Partition and Offset are the whole record's position on the decisions
	// topic; Partition is -1 when a Complete record came from memory.
	Partition int32
	Offset    int64
}

// appendStoredDecision appends the value of a decision key to v:
//
//	u8 format (1) | uvarint partition | uvarint offset | header
func appendStoredDecision(v []byte, partition int32, offset int64, d *pb.DecisionRecord, keepChains bool) ([]byte, error) {
	return events.AppendDecisionHeader(appendStoredPosition(v, storedDecisionFormat, partition, offset), d, keepChains)
}

// appendStoredPosition appends the front of a decision key's value, up to
// the header.
func appendStoredPosition(v []byte, format byte, partition int32, offset int64) []byte {
	v = append(v, format)
	v = binary.AppendUvarint(v, uint64(partition))
	return binary.AppendUvarint(v, uint64(offset))
}

// The formats of a decision key's value: the position is the record's on
// the decisions topic, or the position of the load delta the decision was
// learnt from (its decisions position is unknown, and served as -1).
const (
	storedDecisionFormat = 1
	storedDeltaFormat    = 2
)

// decodeStoredDecision reads what appendStoredDecision wrote.
func decodeStoredDecision(v []byte) (StoredDecision, error) {
	p, off, header, err := decodeStoredPosition(v)
	if err != nil {
		return StoredDecision{}, err
	}
	d := &pb.DecisionRecord{}
	if err := proto.Unmarshal(header, d); err != nil {
		return StoredDecision{}, fmt.Errorf("stored decision: %w", err)
	}
	if v[0] == storedDeltaFormat {
		p, off = -1, -1
	}
	return StoredDecision{Record: d, Partition: p, Offset: off}, nil
}

// decodeStoredPosition reads the front of a decision key's value: the
// position, and the header that follows it.
func decodeStoredPosition(v []byte) (partition int32, offset int64, header []byte, err error) {
	if len(v) == 0 || v[0] != storedDecisionFormat && v[0] != storedDeltaFormat {
		return 0, 0, nil, errors.New("stored decision: unknown value format")
	}
	r := reader{b: v[1:]}
	p, off := r.uvarint(), r.uvarint()
	if r.err != nil || p > math.MaxInt32 || off > math.MaxInt64 {
		return 0, 0, nil, errors.New("stored decision: bad position")
	}
	return int32(p), int64(off), r.b, nil
}
