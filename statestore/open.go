package statestore

import (
	"encoding/binary"
	"math"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Open requests: with Options.PeerSums, a store of load deltas holds each
// decision of the log as an open request in memory, from its decision
// entry to its terminal lifecycle entry or its expiry, instead of as
// order-independent facts written to Pebble and kept twice the expiry
// (active.go). A peer then writes no key per decision for its load: the
// requests reach Pebble only in checkpoints (opencheckpoint.go), and only
// those still open when one is written.
//
// Why partition order is enough: every entry about a request is keyed by
// its decode worker, so a decision's delta and its lifecycle deltas share
// one partition, and the deciding replica appends the decision before it
// answers, so no lifecycle entry precedes the decision it names. A
// partition's requests are therefore a function of that partition's
// records, read in order, whatever the interleaving with other partitions.
//
// Invariants, kept here:
//
//   - An open request belongs to the partition its decision was read from:
//     its entry id is openEntryID(decision id, partition), and only
//     lifecycle entries of the same partition reach it. A decision id that
//     appears on two partitions (a forged or mirrored copy) is two requests,
//     each a function of its own partition, so replicas that read the
//     partitions interleaved differently still agree.
//   - Whether a request is still held is decided by its partition's clock
//     (openFamily.clock: the latest event time read from that partition),
//     never by the store's clock, which other partitions move: a request
//     is dropped once its partition's clock passes goneAt, and a decision
//     already past it when read is never opened. Entries are dropped only
//     there (dropGone), so a lifecycle entry finds its request or not by
//     its partition's records alone.
//   - What a held request contributes is decided at the store's clock,
//     reqNow, by the facts' rules (setContribution, setRecent): its decode
//     worker carries its blocks while it is neither ended nor expired
//     (max(t_d, t_p) + expiry > reqNow), the worker that prefills carries
//     its prefill tokens until prefill_done, and its workers' recent counts
//     hold it while t_d + recentWindow > reqNow. The sweep recomputes it at
//     each change (schedule), so at equal offsets equal requests contribute
//     equally.
//   - Everything a request holds is in its entry (encodeOpen), so a
//     checkpoint of the entries, the clocks and the offsets they stand at
//     restores the family exactly, and the digest hashes it from memory.

// openFamily is the memory of the open requests besides the entries
// themselves (activeTable.entries, which the facts path uses too).
type openFamily struct {
	// clock: per load-deltas partition, the latest event time read from it.
	clock map[int32]int64
	// next: per load-deltas partition, the next offset the family has
	// applied. It equals the store's offset, except after a restart, while
	// the records since the last checkpoint are read again (Apply's replay).
	next map[int32]int64
	// gone: per partition, the requests by the clock time they can be
	// dropped at. An item is pushed at each change of a request's goneAt;
	// an item whose request moved on is skipped when popped.
	gone map[int32]*openHeap
	// due: the requests by the store's clock time their contribution
	// changes at (openRefresh), for the sweep (sweepOpen).
	due openHeap

	// Checkpoint bookkeeping (opencheckpoint.go), memory only.
	removed []string // ids with a key in Pebble, dropped since the last checkpoint
	// unwritten: per partition, the requests opened from it that no
	// checkpoint holds yet, in offset order (records are applied in
	// partition order), dropped ones included until a checkpoint passes
	// them. A checkpoint writes the front of each queue up to its base, so
	// it costs the requests it writes, not every request held: with a long
	// IdempotencyWindow a peer holds minutes of the group's decisions.
	unwritten map[int32][]*reqEntry
	// changed: requests a checkpoint holds that changed after it (noteOpenChange),
	// each once per change; a checkpoint writes those its base has passed.
	changed []*reqEntry
	// latDirty: the latency model's entries changed since the last
	// checkpoint, which writes them (opencheckpoint.go).
	latDirty map[string]struct{}
	ckptNext map[int32]int64 // where the last checkpoint written resumes from
	lastCkpt int64           // reqNow at the last checkpoint
	// marks: the family's position (next and clock) at each checkpoint
	// of the last openReplayWindow, oldest first: a checkpoint resumes
	// from the oldest still in the window, so that the requests opened
	// since are read again rather than written.
	marks []openMark
	ebuf  []byte
	// marked: the store holds openMarkerKey (read at Open).
	marked bool
}

// openMark is the family's position at one checkpoint.
type openMark struct {
	at    int64 // reqNow
	next  map[int32]int64
	clock map[int32]int64
}

func newOpenFamily() *openFamily {
	return &openFamily{clock: map[int32]int64{}, next: map[int32]int64{}, gone: map[int32]*openHeap{}, unwritten: map[int32][]*reqEntry{},
		ckptNext: map[int32]int64{}, lastCkpt: math.MinInt64, latDirty: map[string]struct{}{},
		marks: []openMark{{at: math.MinInt64, next: map[int32]int64{}, clock: map[int32]int64{}}}}
}

// openEntryID is the entry id of a decision read from partition: "d", the
// decision id, then 0xff (never in a valid UTF-8 id) and the partition.
func openEntryID(dst []byte, decisionID string, partition int32) []byte {
	dst = append(append(append(dst[:0], 'd'), decisionID...), 0xff)
	return binary.BigEndian.AppendUint32(dst, uint32(partition))
}

// applyOpenDelta applies a load delta's entries as open requests, and
// teaches the latency model. replay: the record was applied before a
// restart and is read again (Apply), so approximate mode's predictions,
// memory only and short-lived, are left alone. The request index is the
// open requests (openindex.go).
func (st *state) applyOpenDelta(d *pb.LoadDelta, partition int32, offset int64, replay bool) {
	chains := events.LoadDeltaChains(d)
	for i, e := range d.GetDecisions() {
		r := recordOfDelta(e, chains[i])
		st.observe(r.GetDecidedAtUnixNano(), true)
		st.openClock(partition, r.GetDecidedAtUnixNano())
		st.openDecision(r, partition, offset)
		// The log copy serves lookups from now on, from the open request
		// (openindex.go): no key of the request index is written.
		st.dropLocalDecision(r.GetDecisionId())
		if !replay && st.decisionPresent(r) {
			st.predictDecision(r)
		}
		st.learnDelta(e) // a fact learnt again changes nothing (opencheckpoint.go)
	}
	for _, e := range d.GetLifecycle() {
		o := outcomeOfDelta(e)
		st.observe(o.GetEventTimeUnixNano(), true)
		st.openClock(partition, o.GetEventTimeUnixNano())
		st.openLifecycle(o, partition)
		st.learnOutcome(o)
		if !replay { // sent before the restart, or lost with it
			st.requestEnded(o)
		}
	}
}

// openClock advances partition's clock to t and drops the requests it
// passes.
func (st *state) openClock(partition int32, t int64) {
	f := st.act.open
	c, ok := f.clock[partition]
	if ok && t <= c {
		return
	}
	f.clock[partition] = t
	h := f.gone[partition]
	for h != nil && len(*h) > 0 && (*h)[0].at <= t {
		it := h.pop()
		if e := it.e; !e.dropped && st.goneAt(e) <= t {
			st.dropOpen(e)
		}
	}
}

// goneAt is the partition clock time from which a request contributes
// nothing, no entry of its partition can change that, and lookups no
// longer need it: past its hold (Options.IdempotencyWindow, at least the
// recent window), and ended or past its expiry.
func (st *state) goneAt(e *reqEntry) int64 {
	g := addSat(e.tD, st.act.cfg.openHold)
	if e.flags&fTerminal == 0 {
		g = max(g, addSat(openLast(e), st.act.cfg.expiry))
	}
	return g
}

// openLast is the request's last event that keeps it alive.
func openLast(e *reqEntry) int64 {
	if e.flags&fPrefillDone != 0 && e.tP > e.tD {
		return e.tP
	}
	return e.tD
}

func (st *state) pushGone(e *reqEntry) {
	f := st.act.open
	h := f.gone[e.partition]
	if h == nil {
		h = &openHeap{}
		f.gone[e.partition] = h
	}
	h.push(openItem{at: st.goneAt(e), e: e})
}

// openItem is a request and a time: when its partition's clock may drop
// it (openFamily.gone), or when its contribution changes at the store's
// clock (openFamily.due). An item whose request has moved on (dropped, or
// a newer item pushed) is skipped or harmless when popped.
type openItem struct {
	at int64
	e  *reqEntry
}

// openHeap orders items by time, then entry id: a deterministic order. Typed, not container/heap: an item pushed per
// request and per lifecycle event is not boxed.
type openHeap []openItem

func (h openHeap) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].e.id < h[j].e.id
}

func (h *openHeap) push(it openItem) {
	*h = append(*h, it)
	q := *h
	for j := len(q) - 1; j > 0; {
		p := (j - 1) / 2
		if !q.less(j, p) {
			break
		}
		q[j], q[p] = q[p], q[j]
		j = p
	}
}

func (h *openHeap) pop() openItem {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = openItem{}
	q = q[:n]
	for j := 0; ; {
		c := 2*j + 1
		if c >= n {
			break
		}
		if c+1 < n && q.less(c+1, c) {
			c++
		}
		if !q.less(c, j) {
			break
		}
		q[j], q[c] = q[c], q[j]
		j = c
	}
	*h = q
	return top
}

// openDecision opens the request of a decision read from partition at
// offset. Our own decision read back takes over its local share, as
// applyDecision does.
func (st *state) openDecision(d *pb.DecisionRecord, partition int32, offset int64) {
	a, f := st.act, st.act.open
	l := st.takeLocal(d)
	st.obuf = openEntryID(st.obuf, d.GetDecisionId(), partition)
	tD := d.GetDecidedAtUnixNano()
	if _, ok := a.entries[string(st.obuf)]; ok || addSat(tD, max(a.cfg.expiry, a.cfg.openHold)) <= f.clock[partition] {
		// The same decision again in this partition (a retried append: the
		// first copy holds), or one its partition's clock has passed.
		st.dropLocal(l)
		return
	}
	e := &reqEntry{id: string(st.obuf)}
	st.decisionFacts(e, d)
	e.partition, e.offset = partition, offset
	a.entries[e.id] = e
	f.unwritten[partition] = append(f.unwritten[partition], e)
	st.noteDecision(e)
	st.handOver(l, e)
	st.pushGone(e)
	st.openRefresh(e)
}

// openLifecycle applies a lifecycle entry read from partition to the open
// request it names, or to every open request of its request id read from
// that partition when it names no decision.
func (st *state) openLifecycle(o *pb.OutcomeEvent, partition int32) {
	a := st.act
	if id := o.GetDecisionId(); id != "" {
		st.obuf = openEntryID(st.obuf, id, partition)
		if e := a.entries[string(st.obuf)]; e != nil {
			st.openEvent(e, o)
		}
		return
	}
	for _, id := range a.byRequest[o.GetRequestId()] {
		if e := a.entries[id]; e != nil && e.partition == partition {
			st.openEvent(e, o)
		}
	}
}

func (st *state) openEvent(e *reqEntry, o *pb.OutcomeEvent) {
	was := st.goneAt(e)
	if !e.noteEvent(o.GetKind(), o.GetEventTimeUnixNano()) {
		return
	}
	st.noteOpenChange(e)
	if st.goneAt(e) != was {
		st.pushGone(e)
	}
	st.openRefresh(e)
}

// openRefresh recomputes an open request's contribution at reqNow and
// schedules its next change. It never drops the request (openClock does).
func (st *state) openRefresh(e *reqEntry) {
	a, now := st.act, st.reqNow
	last := openLast(e)
	e.effLast = last
	alive := e.flags&fTerminal == 0 && addSat(last, a.cfg.expiry) > now
	st.setRecent(e, addSat(e.tD, recentWindow) > now)
	st.setContribution(e, alive, alive && e.flags&fPrefillDone == 0 && e.prefillTok > 0)
	if e.flags&fTerminal != 0 && e.chain != nil {
		st.setChain(e, nil) // ended: its blocks left with its contribution
		st.noteOpenChange(e)
	}
	next := int64(math.MaxInt64)
	if e.onDecode {
		next = addSat(last, a.cfg.expiry)
	}
	if e.recentOn {
		next = min(next, addSat(e.tD, recentWindow))
	}
	if next != math.MaxInt64 {
		a.open.due.push(openItem{at: next, e: e})
	}
}

// noteOpenChange counts a change of an open request's checkpointed state,
// and queues it for the next checkpoint when one holds it already.
func (st *state) noteOpenChange(e *reqEntry) {
	e.ver++
	if e.stored {
		st.act.open.changed = append(st.act.open.changed, e)
	}
}

// sweepOpen applies every change of an open request's contribution due by
// reqNow. An item whose request was dropped is skipped; one whose request
// was refreshed since is harmless (the refresh is idempotent).
func (st *state) sweepOpen() {
	f := st.act.open
	for len(f.due) > 0 && f.due[0].at <= st.reqNow {
		if it := f.due.pop(); !it.e.dropped {
			st.openRefresh(it.e)
		}
	}
}

// dropOpen forgets a request its partition's clock has passed.
func (st *state) dropOpen(e *reqEntry) {
	a, f := st.act, st.act.open
	st.setContribution(e, false, false)
	st.setRecent(e, false)
	st.setChain(e, nil)
	st.forgetDecision(e)
	st.releaseSlots(e)
	delete(a.entries, e.id)
	e.dropped = true
	if e.stored {
		f.removed = append(f.removed, e.id)
	}
}
