package statestore

import (
	"container/heap"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Approximate mode (Options.Approximate), for engines that
// publish no KV events, like the reference system's --no-router-kv-events:
// the router assumes that a request's prompt is cached on the decode worker
// it was sent to, for a while.
//
// Rule: every decision d present in the state, from the log or this
// replica's own (RecordLocalDecision, at once), makes each hash of its
// chain at the decode worker's block size (decodeChain) a predicted
// device-tier entry of its decode worker (id, dp rank) until
// decided_at(d) + ApproximateTTL. An entry (worker, hash) is alive iff
// max over such decisions of that time > reqNow (the decisions clock,
// state.go). MatchPrefix reports alive entries as device overlap.
//
// Invariants:
//   - A function of the set of decisions and of reqNow (max is order
//     independent; expiry compares to the clock), so replicas and replays
//     agree. A local decision adds what its log copy will add, with the same
//     time, so reading it back changes nothing; one never read back expires
//     like the others.
//   - Not stored: derived at Open from the stored decision records (the 'e'
//     index gives those of the last TTL), which is why DecisionRetention is
//     at least ApproximateTTL in this mode. The digest covers them through
//     the records and the clock.
//   - Independent of KV events, which still apply: a predicted entry is one
//     more holder of the hot index bit (slot, hash, device), counted like a
//     duplicate engine hash (prefix.go indexAdd), so the bit is set while
//     an engine block OR a prediction holds it. AllBlocksCleared,
//     SourceReset and tombstones drop engine blocks only (clearSlot puts
//     the predictions' bits back): ordering a prediction against a KV event
//     would compare two topics, which replicas interleave differently.
//
// A record whose chain was cut to fit its size budget (HashChain
// omitted_blocks) predicts its kept prefix only: the rest of the prompt's
// hashes are not in the record, and a replica must predict exactly what
// its log copy gives every other replica. A later request matching beyond
// the prefix sees the predicted prefix as its overlap, which undercounts
// the cache and so errs towards prefilling, never towards a false hit.
//
// Known gap: predictions age by the decisions clock, which moves only when
// decisions or outcomes arrive. After a quiet spell, the first decision is
// made with the predictions of before it (the engine may still hold them);
// its log copy then advances the clock and sweeps them.

// decodeChain is d's hash chain at its decode worker's block size: the
// record's block_size, else that of the decode worker's candidate row;
// with neither, the chain if there is exactly one.
func decodeChain(d *pb.DecisionRecord) []uint64 {
	bs := d.GetBlockSize()
	if bs == 0 {
		dw := d.GetDecodeWorker()
		for _, c := range d.GetCandidates() {
			if w := c.GetWorker(); c.GetPool() == pb.Pool_POOL_DECODE && w.GetWorkerId() == dw.GetWorkerId() && w.GetDpRank() == dw.GetDpRank() {
				bs = c.GetBlockSize()
				break
			}
		}
	}
	chains := d.GetChains()
	if bs == 0 {
		if len(chains) == 1 {
			return chains[0].GetBlockHashes()
		}
		return nil
	}
	for _, c := range chains {
		if c.GetBlockSize() == bs {
			return c.GetBlockHashes()
		}
	}
	return nil
}

type predDue struct {
	at    int64
	slot  int32
	chain []uint64 // the record's own slice: records are immutable
}

// predHeap orders predictions by expiry. Pop order among equal times does
// not matter: each pop's effect depends only on the entries and the clock.
type predHeap []predDue

func (h predHeap) Len() int           { return len(h) }
func (h predHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h predHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *predHeap) Push(x any)        { *h = append(*h, x.(predDue)) }
func (h *predHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = predDue{}
	*h = old[:len(old)-1]
	return x
}

// predictDecision adds d's predicted entries (no-op unless approximate).
func (st *state) predictDecision(d *pb.DecisionRecord) {
	ttl := st.act.cfg.approxTTL
	if ttl <= 0 {
		return
	}
	until := addSat(d.GetDecidedAtUnixNano(), ttl)
	chain := decodeChain(d)
	if until <= st.reqNow || len(chain) == 0 {
		return
	}
	w := d.GetDecodeWorker()
	slot := st.slotOf(w.GetWorkerId(), w.GetDpRank())
	ws := st.workers[slot]
	if ws.pred == nil {
		ws.pred = map[uint64]int64{}
	}
	for i, h := range chain {
		old, ok := ws.pred[h]
		if !ok {
			up := h
			if i > 0 {
				up = chain[i-1]
			}
			st.indexAdd(slot, h, TierDevice, up)
			st.predicted++
		}
		if !ok || until > old {
			ws.pred[h] = until
		}
	}
	heap.Push(&st.predDue, predDue{at: until, slot: slot, chain: chain})
}

// sweepPredictions drops the entries whose time has come. Each queued
// decision checks its own hashes: an entry refreshed by a later decision
// stays.
func (st *state) sweepPredictions() {
	for len(st.predDue) > 0 && st.predDue[0].at <= st.reqNow {
		it := heap.Pop(&st.predDue).(predDue)
		ws := st.workers[it.slot]
		for _, h := range it.chain {
			if until, ok := ws.pred[h]; ok && until <= st.reqNow {
				delete(ws.pred, h)
				st.indexRemove(it.slot, h, TierDevice)
				st.predicted--
			}
		}
		if len(ws.pred) == 0 {
			ws.pred = nil
		}
	}
}

// restorePredictions puts the predictions' bits back after clearSlot
// dropped every bit of the slot: each prediction is then the only holder.
func (st *state) restorePredictions(slot int32) {
	for h := range st.workers[slot].pred {
		// The parent is not kept with predictions: h stands for unknown.
		st.idx.add(h, slot, TierDevice, h)
	}
}

// rebuildPredictions derives the predictions at Open from the stored
// decisions of the last TTL.
func (s *Store) rebuildPredictions(st *state) error {
	ttl := st.act.cfg.approxTTL
	if ttl <= 0 {
		return nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: expiryKey(st.reqNow-ttl+1, ""), UpperBound: []byte{famExpiry + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		_, id, err := parseExpiryKey(it.Key())
		if err != nil {
			return err
		}
		v, closer, err := s.db.Get(decisionKey(id))
		if err != nil {
			return fmt.Errorf("decision %q indexed but not stored: %w", id, err)
		}
		sd, err := decodeStoredDecision(v)
		_ = closer.Close()
		if err != nil {
			return fmt.Errorf("decision %q: %w", id, err)
		}
		st.predictDecision(sd.Record)
	}
	return it.Error()
}

// PredictedEntries is the number of (worker, block) entries approximate
// mode currently predicts.
func (s *Store) PredictedEntries() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.st.predicted
}
