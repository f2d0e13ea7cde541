package statestore

import (
	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Apply rules of the load and workers topics.
//
// Load: each (worker, rank) keeps its latest sample by event time
// (sample_time_unix_nano); a sample older than the one held is ignored, and
// on a tie the later record wins. All samples of a worker share its key and
// so its partition, which orders them: the result does not depend on how
// partitions interleave. The age of a sample is measured against the
// state's event-time clock (state.observe), never the wall clock.
//
// Workers: the last registration of a worker id wins; a new id past
// Options.MaxWorkers is skipped (skip.go), and ranks at or beyond the
// registration's dp_size are purged. A tombstone (null value) deregisters
// the worker: its registration, the prefix tables and load samples of all
// its ranks are purged and its slots freed. Its active requests are left
// to complete or expire, as they would for a live worker.
//
// Tombstones and the kv-events/load records they purge are on different
// topics, so replicas interleave them differently. To keep the result
// independent of that interleaving, the tombstone's Kafka timestamp T is
// kept (key 't'), and a kv-events or load record of that worker whose Kafka
// timestamp is ≤ T is ignored whenever it is applied: before or after the
// tombstone, it ends up purged. The remaining order dependence is a record
// stamped after T but applied before the tombstone (an engine still
// publishing after its deregistration): the tombstone purges it on one
// replica and not on another. Ingest closes that gap by writing a
// SourceReset on kv-events (same partition as the worker's blocks) when a
// worker leaves; the state cannot, without a timestamp per block.

func (st *state) applyLoad(b *pebble.Batch, s *pb.LoadSample) {
	w := s.GetWorker()
	slot := st.slotOf(w.GetWorkerId(), w.GetDpRank())
	ws := st.workers[slot]
	// Every sample counts for the first load time (a min: order
	// independent), even one older than the sample held.
	st.noteLoadTime(slot, s.GetSampleTimeUnixNano())
	if ws.hasLoad && ws.load.GetSampleTimeUnixNano() > s.GetSampleTimeUnixNano() {
		st.stats.staleLoads++
		return
	}
	st.setLoad(slot, s)
	v, err := events.Marshal(s)
	if err != nil {
		return // unreachable for a decoded message
	}
	_ = b.Set(workerRankKey(nil, famLoad, w.GetWorkerId(), w.GetDpRank()), v, nil)
}

func (st *state) setLoad(slot int32, s *pb.LoadSample) {
	ws := st.workers[slot]
	// A capacity the registration lacks is taken from the sample, so the
	// decider-facing worker list must be redone when it changes.
	if reg := st.regs[ws.wr.id]; reg != nil && reg.TotalKvBlocks == nil &&
		(!ws.hasLoad || ws.load.GetKvTotalBlocks() != s.GetKvTotalBlocks() || (ws.load.KvTotalBlocks == nil) != (s.KvTotalBlocks == nil)) {
		st.viewDirty = true
	}
	ws.load, ws.hasLoad = s, true
}

func (st *state) applyRegistration(b *pebble.Batch, r *pb.WorkerRegistration) {
	id := r.GetWorkerId()
	if st.regs[id] == nil {
		st.unregSlots -= len(st.byID[id]) // they leave the unregistered budget
		if st.health[id] != nil {
			st.unregHealth--
		}
	}
	st.regs[id] = r
	st.viewDirty = true
	v, err := events.Marshal(r)
	if err != nil {
		return
	}
	_ = b.Set(registryKey(id), v, nil)
	// Ranks the worker no longer has (a smaller dp_size, or state applied
	// before the registration for ranks it never had) are purged, as a
	// tombstone purges a worker: records of those ranks are skipped from
	// now on (reasonDPRank), so the result is the same whichever was
	// applied first.
	n := rankLimit(r)
	for _, slot := range st.slotsOf(id) {
		if st.workers[slot].wr.rank >= n {
			st.purgeSlot(b, slot)
		}
	}
}

// purgeSlot drops everything a (worker, rank) holds, in memory and in
// Pebble, and queues the slot to be freed.
func (st *state) purgeSlot(b *pebble.Batch, slot int32) {
	ws := st.workers[slot]
	st.clearSlot(b, slot)
	ws.load, ws.hasLoad = nil, false
	st.resetHealth(slot)
	_ = b.Delete(workerRankKey(nil, famLoad, ws.wr.id, ws.wr.rank), nil)
	_ = b.Delete(workerRankKey(nil, famHealth, ws.wr.id, ws.wr.rank), nil)
	st.queueFree(slot)
}

func (st *state) beforeTombstone(id string, logTime int64) bool {
	t, ok := st.tombs[id]
	return ok && logTime <= t
}

func (st *state) applyTombstone(b *pebble.Batch, id string, logTime int64) {
	if t, ok := st.tombs[id]; !ok || logTime > t {
		st.tombs[id] = logTime
		_ = b.Set(tombKey(id), i64Value(logTime), nil)
	}
	wasRegistered := st.regs[id] != nil
	if wasRegistered {
		st.unregSlots += len(st.byID[id]) // until freed, they count as unregistered
	}
	st.forgetHealth(b, id, wasRegistered)
	delete(st.regs, id)
	st.viewDirty = true
	for _, slot := range st.slotsOf(id) {
		st.purgeSlot(b, slot)
	}
	_ = b.Delete(registryKey(id), nil)
	lo, hi := workerSpan(famLoad, id)
	st.deleteRange(b, lo, hi)
	lo, hi = workerSpan(famPrefix, id)
	st.deleteRange(b, lo, hi)
	lo, hi = workerSpan(famHealth, id)
	st.deleteRange(b, lo, hi)
	st.stats.tombstones++
}

// loadFromStore is the rebuild path for one stored load sample.
func loadFromStore(v []byte) (*pb.LoadSample, error) {
	s := &pb.LoadSample{}
	return s, proto.Unmarshal(v, s)
}
