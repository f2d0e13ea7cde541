package statestore

import (
	"github.com/cockroachdb/pebble/v2"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Open requests (work in progress; docs/scaling.md, "A running prototype of
// the sums" and "The order to build it in", step 2): with Options.PeerSums,
// a store of source load-deltas holds each decision of the log as an open
// request in memory, from its decision entry to its terminal lifecycle
// entry or its expiry, instead of as order-independent facts kept for the
// facts' retention and written to Pebble.
//
// Why order no longer needs the facts: a worker's entries are totally
// ordered in its partition, and a lifecycle entry about a decision is
// appended after the decision's (the deciding replica appends before it
// answers, and no client posts an event about an answer it has not had).
// So a lifecycle entry finds its decision open, or finds nothing because
// the decision expired, and either way the state is a function of the
// entries read in partition order and the clock.
//
// What an open request contributes is what a facts entry contributes
// (setContribution, setRecent): its decode worker carries its blocks while
// it is neither ended nor expired (max(t_d, t_p) + expiry > now); the
// worker that prefills carries its prefill tokens until prefill_done; its
// workers' recent counts hold it while t_d + recentWindow > now, whether it
// ended or not. An entry leaves memory when it contributes nothing.
//
// Not yet: the open requests are not in Pebble, in the digest or in a
// snapshot, and a restart loses them (build step 3).

// applyOpenDelta applies a load delta's entries as open requests.
func (st *state) applyOpenDelta(b *pebble.Batch, d *pb.LoadDelta, partition int32, offset int64) {
	chains := events.LoadDeltaChains(d)
	for i, e := range d.GetDecisions() {
		r := recordOfDelta(e, chains[i])
		st.observe(r.GetDecidedAtUnixNano(), true)
		st.openDecision(r)
		st.applyDeltaDecisionLog(b, r, partition, offset)
		st.learnDelta(e)
	}
	for _, e := range d.GetLifecycle() {
		o := outcomeOfDelta(e)
		st.observe(o.GetEventTimeUnixNano(), true)
		st.openLifecycle(o)
		st.learnOutcome(o)
	}
}

// openDecision opens the request of a decision read from the log. Our own
// decision read back takes over its local share, as applyDecision does.
func (st *state) openDecision(d *pb.DecisionRecord) {
	a := st.act
	l := a.local[d.GetDecisionId()]
	if l != nil {
		delete(a.local, d.GetDecisionId())
		st.workers[l.decodeSlot].localPending--
	} else if slot, ok := st.lookupSlot(d.GetDecodeWorker().GetWorkerId(), d.GetDecodeWorker().GetDpRank()); ok && st.workers[slot].localPending > 0 {
		st.stats.races++
	}
	id := "d" + d.GetDecisionId()
	if _, ok := a.entries[id]; ok || d.GetDecidedAtUnixNano()+a.cfg.expiry <= st.reqNow {
		// The same entry again (a retried append), or one already expired.
		st.dropLocal(l)
		return
	}
	e := &reqEntry{id: id}
	st.decisionFacts(e, d)
	a.entries[id] = e
	st.noteDecision(e)
	if l != nil && sameShare(l, e) {
		c := l.chain
		st.setChain(l, nil)
		st.setChain(e, c)
		e.onDecode, e.onPrefill = l.onDecode, l.onPrefill
		l.onDecode, l.onPrefill = false, false
	} else {
		st.dropLocal(l)
	}
	st.openRefresh(e)
}

// openLifecycle applies a lifecycle entry to the open request it names, or
// to every open request of its request id when it names no decision.
func (st *state) openLifecycle(o *pb.OutcomeEvent) {
	a := st.act
	if id := o.GetDecisionId(); id != "" {
		if e := a.entries["d"+id]; e != nil {
			st.openEvent(e, o)
		}
		return
	}
	for _, id := range append([]string(nil), a.byRequest[o.GetRequestId()]...) {
		if e := a.entries[id]; e != nil {
			st.openEvent(e, o)
		}
	}
}

func (st *state) openEvent(e *reqEntry, o *pb.OutcomeEvent) {
	t := o.GetEventTimeUnixNano()
	switch o.GetKind() {
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
	}
	st.openRefresh(e)
}

// openRefresh recomputes an open request's contribution at now, drops it
// when it contributes nothing, and schedules its next change.
func (st *state) openRefresh(e *reqEntry) {
	a, now := st.act, st.reqNow
	last := e.tD
	if e.flags&fPrefillDone != 0 && e.tP > last {
		last = e.tP
	}
	e.effLast = last
	alive := e.flags&fTerminal == 0 && last+a.cfg.expiry > now
	recent := e.tD+recentWindow > now
	st.setRecent(e, recent)
	st.setContribution(e, alive, alive && e.flags&fPrefillDone == 0 && e.prefillTok > 0)
	if e.flags&fTerminal != 0 {
		st.setChain(e, nil) // ended: its blocks left with its contribution
	}
	if !alive && !recent {
		st.releaseSlots(e)
		st.forgetDecision(e)
		st.setChain(e, nil)
		delete(a.entries, e.id)
		return
	}
	st.schedule(e)
}
