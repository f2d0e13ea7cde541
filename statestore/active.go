package statestore

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/latmodel"
)

// Router-side active accounting (conditional-disagg.md, "Router-side active
// decode block accounting"), event-sourced from decisions and outcomes.
//
// Each request is an entry of facts, keyed by decision id: the decision
// (D, time t_d), the latest prefill_done (P, t_p) and the latest
// completed/cancelled (T, t_t). From the facts present:
//
//   - the decode worker carries the request's blocks while D is present, T
//     is absent and max(t_d, t_p) + expiry > now: the blocks of its hash
//     chain, deduplicated per worker by hash (refcounts), plus the blocks
//     without a hash (the trailing partial block: ⌈P/B⌉ − len(chain));
//   - the worker that prefills carries the prefill tokens under the same
//     condition and while P is absent: the prefill worker for a remote
//     prefill (P minus its device overlap, from the candidate row), the
//     decode worker for a local one (the effective ISL);
//   - now is the max event time of decisions and outcomes (state.observe).
//
// Order independence. Decisions and outcomes are on different topics, so
// replicas see them interleaved differently. The state is therefore
// defined as a function of the SET of facts seen and of now, never of
// their order: a fact is present iff it was seen and its time + retention
// > now (outcome facts get maxClockSkew more, so that an outcome stamped a
// little before its decision cannot vanish before it). Dropping facts that
// are no longer present (GC, sweep) and ignoring facts that arrive already
// absent are then the same operation, whenever it happens. The one bound:
// an outcome stamped more than maxClockSkew before its decision.
//
// An outcome without a decision id is kept as facts of its request id (an
// entry "r" + request id) and applies to every decision of that request,
// whichever arrived first: entries hold the facts as they came, keyed by
// what they name, and the effective facts of a decision are its own plus
// its request's.
//
// A replica's own decisions (RecordLocalDecision) count at once, outside
// the log state (never in Pebble or the digest), until the same decision
// id is read back from the log or expires. A log decision from another
// replica on a worker that has such a pending local decision is a race
// (two replicas decided for it without seeing each other): counted in
// pdrouter_active_decision_races_total.

type activeConfig struct {
	expiry    int64 // ns
	retention int64 // ns, presence window of a fact after its event time
	skew      int64 // ns, extra presence of outcome facts

	// Not active accounting, but shaping the state the same way (one
	// config for the state's apply rules):
	decisionRetention int64 // ns, Options.DecisionRetention
	maxLocal          int   // Options.MaxLocalDecisions
	approxTTL         int64 // ns, Options.ApproximateTTL; 0 when approximate mode is off
	kvMissingAfter    int64 // ns, Options.KvEventsMissingAfter
	maxWorkers        int   // Options.MaxWorkers
	latency           latmodel.Config
	open              bool // Options.PeerSums (open.go)
	// replica: with SourceLoadShares, Options.ReplicaID (sharerows.go,
	// shares.go); "" otherwise.
	replica string
	// sharesEpoch: Options.SharesEpoch.
	sharesEpoch uint64
	// samplesPerSecond: Options.LatencySamplesPerSecond, defaulted.
	samplesPerSecond int
	openHold         int64 // ns, how long an open request is held at least (Options.IdempotencyWindow)
}

const (
	fDecision = 1 << iota
	fLocalMode
	fPrefillDone
	fTerminal
	fHasPrefill
)

type reqEntry struct {
	id         string // entry id: "d" + decision id, or "r" + request id
	requestID  string
	flags      uint8
	tD, tP, tT int64

	decodeID    string
	decodeRank  uint32
	prefillID   string
	prefillRank uint32
	extra       int64 // active blocks without a hash
	prefillTok  int64
	chain       []uint64 // kept while D present and T absent; memory only (chains.go)
	// partition and offset: the decision record's position on the
	// decisions topic, where the chain is read back from at Open.
	partition int32
	offset    int64
	// lost: the length of a chain that could not be read back at Open
	// (chains.go); its blocks count as blocks without a hash. Memory only.
	lost int64

	// Derived, memory only.
	decodeSlot  int32
	prefillSlot int32 // slot carrying the prefill tokens, -1 when none
	onDecode    bool
	onPrefill   bool
	local       bool  // a RecordLocalDecision entry
	effLast     int64 // last event time of the effective facts
	recentOn    bool  // counted in its workers' recent counts (setRecent)
	// An open request's checkpoint state (opencheckpoint.go): ver counts
	// its changes, storedVer is the one its key in Pebble holds.
	stored         bool
	ver, storedVer uint32
	dropped        bool // an open request no longer held (open.go dropOpen)
}

type activeTable struct {
	cfg       activeConfig
	entries   map[string]*reqEntry
	byRequest map[string][]string // request id → entry ids of its decisions
	local     map[string]*reqEntry
	due       dueHeap
	idx       activeIndex // block hash → slots where it is active, with refcounts (activeidx.go)
	active    int         // requests carrying decode blocks (log + local)
	// chainBlocks: the hashes held by entries' chains, log and local
	// (chains.go, pdrouter_statestore_active_chain_bytes).
	chainBlocks int64
	// open: the open requests' family (open.go); nil unless cfg.open.
	open *openFamily
}

func newActiveTable(cfg activeConfig) *activeTable {
	a := &activeTable{
		cfg: cfg, entries: map[string]*reqEntry{}, byRequest: map[string][]string{},
		local: map[string]*reqEntry{},
	}
	if cfg.open {
		a.open = newOpenFamily()
	}
	return a
}

// decisionFacts fills the D fact of e from a decision record, using only
// the record itself (never the registry, which may not have arrived yet).
func (st *state) decisionFacts(e *reqEntry, d *pb.DecisionRecord) {
	e.flags |= fDecision
	e.tD = d.GetDecidedAtUnixNano()
	e.requestID = d.GetRequestId()
	e.decodeID, e.decodeRank = d.GetDecodeWorker().GetWorkerId(), d.GetDecodeWorker().GetDpRank()
	chain, bs, prefillRow := activeChain(d)
	p := int64(d.GetPromptTokens())
	if bs > 0 {
		e.extra = max((p+int64(bs)-1)/int64(bs)-int64(len(chain)), 0)
	}
	if e.flags&fTerminal == 0 && len(chain) > 0 {
		// Shared with the record, which is immutable (records are never
		// modified once decoded or handed to RecordLocalDecision).
		st.setChain(e, chain)
	}
	if d.GetMode() == "local" {
		e.flags |= fLocalMode
		e.prefillTok = int64(d.GetEffectiveIsl())
	} else if pw := d.GetPrefillWorker(); pw != nil && pw.GetWorkerId() != "" {
		e.flags |= fHasPrefill
		e.prefillID, e.prefillRank = pw.GetWorkerId(), pw.GetDpRank()
		cached := int64(0)
		if prefillRow != nil {
			cached = int64(prefillRow.GetOverlapBlocks()) * int64(prefillRow.GetBlockSize())
		}
		e.prefillTok = max(p-cached, 0)
	}
	st.resolveSlots(e)
}

// activeChain returns what active accounting reads of a decision's table
// and chains: the chain at the decode worker's block size (that of its
// first candidate row; with no row, the first chain), that block size, and
// the prefill worker's first candidate row. The chains read back at Open
// (chains.go) are chosen by the same rule.
func activeChain(d *pb.DecisionRecord) (chain []uint64, bs uint32, prefillRow *pb.Candidate) {
	dw, pw := d.GetDecodeWorker(), d.GetPrefillWorker()
	for _, c := range d.GetCandidates() {
		w := c.GetWorker()
		if c.GetPool() == pb.Pool_POOL_DECODE && w.GetWorkerId() == dw.GetWorkerId() && w.GetDpRank() == dw.GetDpRank() && bs == 0 {
			bs = c.GetBlockSize()
		}
		if pw != nil && c.GetPool() == pb.Pool_POOL_PREFILL &&
			w.GetWorkerId() == pw.GetWorkerId() && w.GetDpRank() == pw.GetDpRank() && prefillRow == nil {
			prefillRow = c
		}
		if bs != 0 && (pw == nil || prefillRow != nil) {
			break // both first matches found: the rest cannot change them
		}
	}
	for _, c := range d.GetChains() {
		if bs == 0 || c.GetBlockSize() == bs {
			return c.GetBlockHashes(), c.GetBlockSize(), prefillRow
		}
	}
	return nil, bs, prefillRow
}

func (st *state) resolveSlots(e *reqEntry) {
	e.prefillSlot = -1
	if e.flags&fDecision == 0 {
		return
	}
	e.decodeSlot = st.slotOf(e.decodeID, e.decodeRank)
	switch {
	case e.flags&fLocalMode != 0:
		e.prefillSlot = e.decodeSlot
	case e.flags&fHasPrefill != 0:
		e.prefillSlot = st.slotOf(e.prefillID, e.prefillRank)
	}
}

// applyDecision applies a decision record read from the decisions topic at
// (partition, offset).
func (st *state) applyDecision(b *pebble.Batch, d *pb.DecisionRecord, partition int32, offset int64) {
	a := st.act
	// Our own decision read back: it counts once, from now on as a log fact.
	l := st.takeLocal(d)
	if d.GetDecidedAtUnixNano()+a.cfg.retention <= st.reqNow {
		st.dropLocal(l)
		return // already absent: the same as seen, then swept
	}
	id := "d" + d.GetDecisionId()
	e := a.entries[id]
	if e == nil {
		e = &reqEntry{id: id}
		a.entries[id] = e
	}
	if e.flags&fDecision != 0 {
		st.dropLocal(l)
		if (partition < e.partition || partition == e.partition && offset < e.offset) && e.chainLen() > 0 {
			// The same record delivered again (facts are a set), at a lower
			// position: the entry names the lowest position of its record,
			// whatever order the partitions were read in.
			e.partition, e.offset = partition, offset
			st.writeEntry(b, e)
		}
		return
	}
	st.decisionFacts(e, d)
	e.partition, e.offset = partition, offset
	if r := a.entries["r"+e.requestID]; r != nil && st.present(r)&fTerminal != 0 {
		st.setChain(e, nil) // never needed: the request is over
	}
	st.noteDecision(e)
	if !e.onDecode && !e.onPrefill {
		st.handOver(l, e)
	} else {
		st.dropLocal(l)
	}
	st.refresh(b, e, true)
}

// takeLocal removes and returns this replica's own share of decision d, now
// read back from the log (nil if it holds none); a decision of another
// replica on a worker with own decisions pending is counted as a race.
func (st *state) takeLocal(d *pb.DecisionRecord) *reqEntry {
	a := st.act
	l := a.local[d.GetDecisionId()]
	if l != nil {
		delete(a.local, d.GetDecisionId())
		st.workers[l.decodeSlot].localPending--
	} else if slot, ok := st.lookupSlot(d.GetDecodeWorker().GetWorkerId(), d.GetDecodeWorker().GetDpRank()); ok && st.workers[slot].localPending > 0 {
		st.stats.races++
	}
	return l
}

// handOver gives log entry e the local share l, when e carries exactly what
// l carried (the same record, read back): e takes over the share instead of
// removing it block by block and adding it again, and the next refresh
// adjusts it like any share, so the aggregates are those of the log alone,
// as if the local decision had never been counted. Otherwise l is dropped.
func (st *state) handOver(l, e *reqEntry) {
	if l == nil || !sameShare(l, e) {
		st.dropLocal(l)
		return
	}
	c := l.chain
	st.setChain(l, nil)
	st.setChain(e, c)
	e.onDecode, e.onPrefill = l.onDecode, l.onPrefill
	l.onDecode, l.onPrefill = false, false
}

// dropLocal removes the share of a local entry that left a.local (nil: no
// entry).
func (st *state) dropLocal(l *reqEntry) {
	if l != nil {
		st.setContribution(l, false, false)
		st.setChain(l, nil)
	}
}

// sameShare reports whether two entries' shares of the aggregates are
// computed from the same facts, so that one can stand for the other.
func sameShare(a, b *reqEntry) bool {
	return a.decodeSlot == b.decodeSlot && a.prefillSlot == b.prefillSlot && a.extra == b.extra &&
		a.prefillTok == b.prefillTok && (a.chain == nil) == (b.chain == nil) && slices.Equal(a.chain, b.chain)
}

func (st *state) applyOutcome(b *pebble.Batch, o *pb.OutcomeEvent) {
	a := st.act
	t := o.GetEventTimeUnixNano()
	if t+a.cfg.retention+a.cfg.skew <= st.reqNow {
		return
	}
	id := "r" + o.GetRequestId()
	if o.GetDecisionId() != "" {
		id = "d" + o.GetDecisionId()
	}
	e := a.entries[id]
	if e == nil {
		e = &reqEntry{id: id, requestID: o.GetRequestId(), prefillSlot: -1}
		a.entries[id] = e
	}
	e.noteEvent(o.GetKind(), t)
	st.refresh(b, e, true)
	if e.id[0] == 'r' {
		st.refreshDecisions(b, e.requestID)
	}
}

// noteEvent records a lifecycle event of kind at t in e's facts: the latest
// time of each kind is kept, so events applied twice or in another order
// give the same facts. It reports whether kind is one the facts hold.
func (e *reqEntry) noteEvent(kind pb.OutcomeEvent_Kind, t int64) bool {
	switch kind {
	case pb.OutcomeEvent_KIND_PREFILL_DONE:
		if e.flags&fPrefillDone == 0 || t > e.tP {
			e.flags |= fPrefillDone
			e.tP = t
		}
	case pb.OutcomeEvent_KIND_COMPLETED, pb.OutcomeEvent_KIND_CANCELLED:
		if e.flags&fTerminal == 0 || t > e.tT {
			e.flags |= fTerminal
			e.tT = t
		}
	default:
		return false
	}
	return true
}

// refreshDecisions refreshes the decisions of a request whose own facts
// (outcomes without a decision id) changed: their effective facts did.
func (st *state) refreshDecisions(b *pebble.Batch, requestID string) {
	for _, id := range slices.Clone(st.act.byRequest[requestID]) {
		if d := st.act.entries[id]; d != nil {
			st.refresh(b, d, false)
		}
	}
}

// present returns the flags of the facts of e still present at now.
func (st *state) present(e *reqEntry) uint8 {
	a, now := st.act, st.reqNow
	flags := e.flags
	if flags&fDecision != 0 && e.tD+a.cfg.retention <= now {
		flags &^= fDecision | fLocalMode | fHasPrefill
	}
	if flags&fPrefillDone != 0 && e.tP+a.cfg.retention+a.cfg.skew <= now {
		flags &^= fPrefillDone
	}
	if flags&fTerminal != 0 && e.tT+a.cfg.retention+a.cfg.skew <= now {
		flags &^= fTerminal
	}
	return flags
}

// refresh drops facts that are no longer present, recomputes what the entry
// contributes, persists it when its facts changed (write) or were dropped,
// and schedules its next change.
func (st *state) refresh(b *pebble.Batch, e *reqEntry, write bool) {
	a, now := st.act, st.reqNow
	flags := st.present(e)
	// Effective facts: the entry's own and, for a decision, those of its
	// request id (outcomes that named no decision).
	eff, tP := flags, e.tP
	if flags&fDecision != 0 {
		if r := a.entries["r"+e.requestID]; r != nil {
			rf := st.present(r)
			eff |= rf & (fPrefillDone | fTerminal)
			if rf&fPrefillDone != 0 && (flags&fPrefillDone == 0 || r.tP > tP) {
				tP = r.tP
			}
		}
	}
	last := e.tD
	if eff&fPrefillDone != 0 && tP > last {
		last = tP
	}
	e.effLast = last
	st.setRecent(e, flags&fDecision != 0 && !e.local && e.tD+recentWindow > now)
	alive := eff&fDecision != 0 && eff&fTerminal == 0 && last+a.cfg.expiry > now
	// Remove the old share before the facts it was computed from go.
	st.setContribution(e, alive, alive && eff&fPrefillDone == 0 && e.prefillTok > 0)
	if flags != e.flags {
		write = true
		if flags&fDecision == 0 && e.flags&fDecision != 0 {
			st.releaseSlots(e)
			st.forgetDecision(e)
			st.setChain(e, nil)
			e.extra, e.prefillTok, e.tD, e.partition, e.offset = 0, 0, 0, 0, 0
			e.decodeID, e.prefillID, e.decodeRank, e.prefillRank = "", "", 0, 0
			e.prefillSlot = -1
		}
		if flags&fPrefillDone == 0 {
			e.tP = 0
		}
		if flags&fTerminal == 0 {
			e.tT = 0
		}
		e.flags = flags
	}
	if eff&fTerminal != 0 && (e.chain != nil || e.lost != 0) {
		st.setChain(e, nil)
		write = true
	}
	if e.flags&(fDecision|fPrefillDone|fTerminal) == 0 {
		st.deleteEntry(b, e)
		return
	}
	if write {
		st.writeEntry(b, e)
	}
	st.schedule(e)
}

func (st *state) writeEntry(b *pebble.Batch, e *reqEntry) {
	st.ebuf = encodeEntry(st.ebuf[:0], e) // Set copies it
	_ = b.Set(activeKey(e.id), st.ebuf, nil)
}

// schedule queues the entry's next change: its expiry while it contributes,
// else the end of presence of its earliest fact.
func (st *state) schedule(e *reqEntry) {
	a := st.act
	next := int64(1<<63 - 1)
	if e.onDecode {
		next = e.effLast + a.cfg.expiry
	}
	if e.recentOn {
		next = min(next, e.tD+recentWindow)
	}
	if e.flags&fDecision != 0 {
		next = min(next, e.tD+a.cfg.retention)
	}
	if e.flags&fPrefillDone != 0 {
		next = min(next, e.tP+a.cfg.retention+a.cfg.skew)
	}
	if e.flags&fTerminal != 0 {
		next = min(next, e.tT+a.cfg.retention+a.cfg.skew)
	}
	if e.local {
		next = e.tD + a.cfg.expiry
	}
	heap.Push(&a.due, dueItem{at: next, id: e.id, local: e.local})
}

func (st *state) deleteEntry(b *pebble.Batch, e *reqEntry) {
	a := st.act
	st.setContribution(e, false, false)
	st.setRecent(e, false)
	st.forgetDecision(e)
	st.setChain(e, nil)
	if a.entries[e.id] == e {
		delete(a.entries, e.id)
		_ = b.Delete(activeKey(e.id), nil)
	}
}

// releaseSlots is called when an entry's decision fact goes. A decision
// names its workers from the record alone, so it may have made slots for
// ids nobody registered: they go with the last entry that names them
// (freeQueued checks that none is left).
func (st *state) releaseSlots(e *reqEntry) {
	st.freeIfUnregistered(e.decodeSlot)
	if e.prefillSlot >= 0 {
		st.freeIfUnregistered(e.prefillSlot)
	}
}

func (st *state) freeIfUnregistered(slot int32) {
	if ws := st.workers[slot]; !ws.freed && st.regs[ws.wr.id] == nil {
		st.queueFree(slot)
	}
}

// noteDecision and forgetDecision keep byRequest: the decision entries of
// each request id (almost always one).
func (st *state) noteDecision(e *reqEntry) {
	ids := st.act.byRequest[e.requestID]
	for _, id := range ids {
		if id == e.id {
			return
		}
	}
	st.act.byRequest[e.requestID] = append(ids, e.id)
}

func (st *state) forgetDecision(e *reqEntry) {
	ids := st.act.byRequest[e.requestID]
	for i, id := range ids {
		if id == e.id {
			ids = append(ids[:i:i], ids[i+1:]...)
			break
		}
	}
	if len(ids) == 0 {
		delete(st.act.byRequest, e.requestID)
	} else {
		st.act.byRequest[e.requestID] = ids
	}
}

// setContribution adds or removes the entry's share of the aggregates.
func (st *state) setContribution(e *reqEntry, decode, prefill bool) {
	a := st.act
	if e.onDecode != decode {
		ws := st.workers[e.decodeSlot]
		sign := int64(1)
		if !decode {
			sign = -1
		}
		if decode {
			ws.activeDistinct += a.idx.addChain(e.chain, e.decodeSlot)
		} else {
			ws.activeDistinct -= a.idx.removeChain(e.chain, e.decodeSlot)
		}
		ws.activeExtra += sign * (e.extra + e.lost)
		ws.activeRequests += sign
		a.active += int(sign)
		e.onDecode = decode
		st.shareChanged(e.decodeSlot)
	}
	if e.onPrefill != prefill && e.prefillSlot >= 0 {
		if prefill {
			st.workers[e.prefillSlot].prefillTokens += e.prefillTok
		} else {
			st.workers[e.prefillSlot].prefillTokens -= e.prefillTok
		}
		e.onPrefill = prefill
		st.shareChanged(e.prefillSlot)
	}
}

// recentWindow is decider.RecentLocalWindow in ns: a decision counts in its workers'
// RecentRequests, and a local decision's prefill tokens in its decode worker's
// RecentLocalPrefill, while its decided_at is within it of the clock. It is shorter
// than any fact's retention, so the counts are a function of the facts present and
// the clock, like the rest of the accounting.
const recentWindow = int64(decider.RecentLocalWindow)

// setRecent adds or removes a decision from its workers' recent counts: the request
// on its decode worker and, for a remote prefill, on its prefill worker; a local
// prefill's tokens on its decode worker. The entry's mode and slots do not change
// while it is counted: they go with its decision fact, after it leaves the counts.
func (st *state) setRecent(e *reqEntry, on bool) {
	if e.recentOn == on {
		return
	}
	sign := int64(1)
	if !on {
		sign = -1
	}
	ws := st.workers[e.decodeSlot]
	ws.recentRequests += sign
	if e.flags&fLocalMode != 0 {
		ws.recentLocal += sign * e.prefillTok
	} else if e.prefillSlot >= 0 {
		st.workers[e.prefillSlot].recentRequests += sign
		st.shareChanged(e.prefillSlot)
	}
	st.shareChanged(e.decodeSlot)
	e.recentOn = on
}

// sweep applies every change due by now (expiry, end of presence). It runs
// at the end of each chunk of records, before readers see the state.
func (st *state) sweep(b *pebble.Batch) {
	a := st.act
	if a.open != nil {
		st.sweepOpen()
	}
	for a.due.Len() > 0 && a.due[0].at <= st.reqNow {
		it := heap.Pop(&a.due).(dueItem)
		if it.local {
			if e := a.local[it.id[1:]]; e != nil && e.tD+a.cfg.expiry <= st.reqNow {
				st.setContribution(e, false, false)
				st.setChain(e, nil)
				delete(a.local, it.id[1:])
				st.workers[e.decodeSlot].localPending--
			}
			continue
		}
		if e := a.entries[it.id]; e != nil {
			st.refresh(b, e, false)
			if it.id[0] == 'r' {
				st.refreshDecisions(b, e.requestID)
			}
		}
	}
}

// recordLocal counts one of this replica's own decisions at once.
func (st *state) recordLocal(d *pb.DecisionRecord) {
	a := st.act
	if _, ok := a.local[d.GetDecisionId()]; ok {
		return
	}
	if _, ok := a.entries["d"+d.GetDecisionId()]; ok {
		return // already read back from the log
	}
	e := &reqEntry{id: "d" + d.GetDecisionId(), local: true}
	st.decisionFacts(e, d)
	if e.tD+a.cfg.expiry <= st.reqNow {
		st.setChain(e, nil)
		return
	}
	a.local[d.GetDecisionId()] = e
	st.workers[e.decodeSlot].localPending++
	st.setContribution(e, true, e.prefillTok > 0)
	st.schedule(e)
}

type dueItem struct {
	at    int64
	id    string
	local bool
}

// dueHeap orders by time, then id: a deterministic pop order.
type dueHeap []dueItem

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].id < h[j].id
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(dueItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// encodeEntry is the canonical encoding of an entry's facts: equal facts,
// equal bytes, whatever order they arrived in.
//
//	u8 format (2) | u8 flags | i64 t_d | i64 t_p | i64 t_t | str request id |
//	str decode id | uvarint decode rank | str prefill id | uvarint prefill rank |
//	uvarint extra | uvarint prefill tokens | uvarint chain length |
//	[uvarint partition | uvarint offset, when the chain length is not 0]
//
// The chain itself is not stored (chains.go): its length and the position
// of the record that holds it are.
func encodeEntry(dst []byte, e *reqEntry) []byte {
	dst = slices.Grow(dst, 96+len(e.requestID)+len(e.decodeID)+len(e.prefillID))
	dst = append(dst, entryFormat, e.flags)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.tD))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.tP))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.tT))
	dst = appendString(dst, e.requestID)
	dst = appendString(dst, e.decodeID)
	dst = binary.AppendUvarint(dst, uint64(e.decodeRank))
	dst = appendString(dst, e.prefillID)
	dst = binary.AppendUvarint(dst, uint64(e.prefillRank))
	dst = binary.AppendUvarint(dst, uint64(e.extra))
	dst = binary.AppendUvarint(dst, uint64(e.prefillTok))
	n := e.chainLen()
	dst = binary.AppendUvarint(dst, uint64(n))
	if n > 0 {
		dst = binary.AppendUvarint(dst, uint64(e.partition))
		dst = binary.AppendUvarint(dst, uint64(e.offset))
	}
	return dst
}

// entryFormat is the first byte of an active entry's value.
const entryFormat = 2

// chainLen is the length of the entry's chain, held or lost.
func (e *reqEntry) chainLen() int64 { return int64(len(e.chain)) + e.lost }

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

var errBadEntry = errors.New("statestore: malformed active entry")

// decodeEntry reads encodeEntry's value. The entry's chain is not in it:
// lost holds its length until chains.go reads it back.
func decodeEntry(id string, v []byte) (*reqEntry, error) {
	if len(v) < 26 || v[0] != entryFormat {
		return nil, errBadEntry
	}
	e := &reqEntry{id: id, flags: v[1], prefillSlot: -1}
	e.tD = int64(binary.LittleEndian.Uint64(v[2:]))
	e.tP = int64(binary.LittleEndian.Uint64(v[10:]))
	e.tT = int64(binary.LittleEndian.Uint64(v[18:]))
	r := reader{b: v[26:]}
	e.requestID = r.str()
	e.decodeID = r.str()
	e.decodeRank = uint32(r.uvarint())
	e.prefillID = r.str()
	e.prefillRank = uint32(r.uvarint())
	e.extra = int64(r.uvarint())
	e.prefillTok = int64(r.uvarint())
	n := r.uvarint()
	if n > 0 {
		p, off := r.uvarint(), r.uvarint()
		if p > math.MaxInt32 || off > math.MaxInt64 || n > maxChainLen {
			return nil, errBadEntry
		}
		e.partition, e.offset, e.lost = int32(p), int64(off), int64(n)
	}
	if r.err != nil || len(r.b) != 0 || e.extra < 0 || e.prefillTok < 0 {
		return nil, errBadEntry
	}
	return e, nil
}

// maxChainLen bounds a stored chain length: a chain longer than a record
// can hold was not written by this code.
const maxChainLen = events.MaxValueBytes / 8

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errBadEntry
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) str() string {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.err = errBadEntry
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// matchActive is MatchActive over slots: the leading run of chain active on
// each live slot. live is consumed.
func (a *activeTable) matchActive(chain []uint64, live []uint64, runs func(slot int32, n int)) {
	a.idx.matchActive(chain, live, runs)
}
