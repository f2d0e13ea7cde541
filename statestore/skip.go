package statestore

import (
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Records that decode (events.Validate holds) but that the state refuses,
// because a limit that needs the registry says so. Each is skipped whole,
// its offset advances, and it is counted in
// pdrouter_records_invalid_total{topic,reason} with one of these reasons.
const (
	// reasonTooManyWorkers: a registration of a new worker id while
	// Options.MaxWorkers ids are registered.
	reasonTooManyWorkers = "too_many_workers"
	// reasonDPRank: a KV event or load sample of a registered worker for a
	// rank at or beyond its dp_size.
	reasonDPRank = "dp_rank_out_of_range"
	// reasonUnknownWorker: a KV event or load sample of a worker id with no
	// registration, once unregistered workers hold maxUnregisteredSlots.
	reasonUnknownWorker = "unknown_worker"
	// reasonOtherWriter: with SourceLoadShares, a load-deltas record of
	// another writer than Options.ReplicaID on the replica's partition.
	reasonOtherWriter = "other_writer"
)

// maxUnregisteredSlots bounds the (worker, rank) pairs of worker ids that
// have no registration.
//
// Why not simply skip records of unregistered workers: the registration
// and the worker's KV events and load samples are on different topics, and
// a replica catching up may well read a worker's first KV events before its
// registration; skipping them there and applying them on a replica that
// read the registration first would make replicas disagree, and lose good
// records. So records of an unknown id are applied as usual (the worker is
// not in the decider's view until it registers; its registration then
// shows the state its earlier records built, on every replica), but only
// while unregistered ids hold fewer than this many slots: a flood of
// records for made-up ids costs at most this many slots. Beyond it they
// are skipped (reasonUnknownWorker). Which records of a flood get in may
// depend on the interleaving of topics, but only for ids nobody
// registered, and a registration or tombstone of an id frees its share of
// the budget. A registered worker's ranks are bounded by its dp_size
// (events.MaxDPSize), so the state's per-rank memory is bounded by the
// registry and this constant, never by a number a record declares.
const maxUnregisteredSlots = 1024

// refuseWorkerRecord returns the reason to skip a KV event or load sample
// of w, or "".
func (st *state) refuseWorkerRecord(w *pb.WorkerRef) string {
	id, rank := w.GetWorkerId(), w.GetDpRank()
	if reg := st.regs[id]; reg != nil {
		if rank >= rankLimit(reg) {
			return reasonDPRank
		}
		return ""
	}
	if _, ok := st.lookupSlot(id, rank); !ok && st.unregSlots >= maxUnregisteredSlots {
		return reasonUnknownWorker
	}
	return ""
}

// refuseRegistration returns the reason to skip a registration, or "".
// Re-registrations of a registered id always apply: the cap counts ids.
func (st *state) refuseRegistration(r *pb.WorkerRegistration) string {
	if st.regs[r.GetWorkerId()] == nil && len(st.regs) >= st.act.cfg.maxWorkers {
		return reasonTooManyWorkers
	}
	return ""
}
