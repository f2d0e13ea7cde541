package statestore

import (
	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// The request index of a store of open requests (open.go).
//
// Why in memory: kept in Pebble, the index cost every replica three keys
// per decision of the group ('d', 'q', 'e'), written at the decision and
// deleted at the end of DecisionRetention, 6-8 µs of a peer's apply
// (docs/scaling.md). The open requests already hold, for as long as a
// lifecycle entry can change one, what a lookup needs of a decision: its
// ids, decided_at, its workers and its mode. So a store of open requests
// writes no index key, and serves lookups from the requests it holds.
//
// What a lookup finds, then: a decision whose open request is held (from
// its decision entry until Options.IdempotencyWindow after decided_at, or
// its end or expiry if later), and within DecisionRetention. Past that:
//
//   - by decision id, nothing here: the API searches the decisions topic
//     around the id's own time (api decisionByID), as for any decision a
//     state does not hold;
//   - by request id, nothing: an idempotent retry of a request decided
//     longer ago than its open request is held is decided again, and a
//     lifecycle event about it is refused as unknown. The request had
//     ended (or expired) by then, so no load is lost; a deployment whose
//     clients retry later sets a longer window.
//
// Invariants, kept here: a lookup reads only held open requests, which are
// a function of each partition's records (open.go), so replicas at equal
// offsets answer alike, and the digest, which hashes every held request's
// entry, covers the index. A decision id held on two partitions (a copied
// record) is the one on the lower partition, the lowest position as
// everywhere else (decisions.go appliedAt); a request id held under
// several decisions names the lowest decision id, the canonical decision
// (decisions.go).

// decisionID returns the decision id of an open request's entry, "" for
// an entry of another kind.
func (e *reqEntry) decisionID() string {
	if n := len(e.id); n >= 6 && e.id[0] == 'd' && e.id[n-5] == 0xff {
		return e.id[1 : n-5]
	}
	return ""
}

// openByID returns the held open request of decision id on the lowest
// partition, or nil. Called with mu held for reading, so it builds keys
// in a buffer of its own, not the state's.
func (st *state) openByID(id string) *reqEntry {
	var best *reqEntry
	var buf []byte
	for p := range st.act.open.clock {
		buf = openEntryID(buf, id, p)
		if e := st.act.entries[string(buf)]; e != nil && (best == nil || p < best.partition) {
			best = e
		}
	}
	return best
}

// openByRequest calls f with each held open request of request id (its
// decisions, one entry a partition). Called with mu held.
func (st *state) openByRequest(requestID string, f func(id string, e *reqEntry)) {
	for _, eid := range st.act.byRequest[requestID] {
		if e := st.act.entries[eid]; e != nil {
			if id := e.decisionID(); id != "" {
				f(id, e)
			}
		}
	}
}

// openStored is what a lookup serves of a held open request: its
// decision's header as a load delta names it, without a position, so that
// whoever needs the whole record reads it from the decisions topic by its
// decode worker and decided_at (api wholeDecision), or at the position of
// one of this replica's own decisions (ownPositions).
func (e *reqEntry) openStored(id string) StoredDecision {
	d := &pb.DecisionRecord{
		DecisionId: id, RequestId: e.requestID, DecidedAtUnixNano: e.tD,
		DecodeWorker: &pb.WorkerRef{WorkerId: e.decodeID, DpRank: e.decodeRank},
		Mode:         string(decider.ModeRemote),
	}
	if e.flags&fLocalMode != 0 {
		d.Mode = string(decider.ModeLocal)
	}
	if e.flags&fHasPrefill != 0 {
		d.PrefillWorker = &pb.WorkerRef{WorkerId: e.prefillID, DpRank: e.prefillRank}
	}
	return StoredDecision{Record: d, Partition: -1, Offset: -1}
}
