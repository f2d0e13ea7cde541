package statestore

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// workerRank names one engine process: a worker id and its DP rank. Each
// rank has its own KV cache, so every per-worker table is keyed by both.
type workerRank struct {
	id   string
	rank uint32
}

// slotState is everything known about one (worker, rank). Slots are dense
// indexes handed out in the order workers are first seen; that order
// differs between replicas, so a slot number never reaches Pebble, the
// digest or the decider (which gets refs in worker-id order, view.go).
type slotState struct {
	wr  workerRank
	key []byte // 'p' id 0x00 rank: the prefix-table key prefix

	blocks engTable
	// dups counts, per (router hash, tier), the engine hashes of this slot
	// beyond the first that map to it (rare: e.g. LoRA variants of one
	// prompt). The hot index holds one bit per (hash, slot, tier), so a
	// removal clears the bit only when no duplicate is left.
	dups   map[dupKey]uint32
	counts [numTiers]int64 // blocks held per tier (orphans included)

	// activeRequests counts the requests carrying decode blocks here (active.go).
	activeRequests int64
	// recentLocal is the prompt tokens of local prefills decided here in the
	// last decider.RecentLocalWindow (active.go setRecent).
	recentLocal int64
	// recentRequests is the decisions that named the worker (as decode worker, or as
	// the prefill worker of a remote prefill) in the same window (setRecent).
	recentRequests int64

	load     *pb.LoadSample
	hasLoad  bool
	lastKvAt int64 // event time of the latest kv-events record, for silence checks
	freed    bool  // the slot is on the free list (freeQueued)

	// KV-event health (kvhealth.go): the first load sample's event time,
	// whether the 'h' key must be rewritten, and the derived flag.
	firstLoadAt  int64
	hasFirstLoad bool
	healthDirty  bool
	kvMissing    bool

	// KV block size (blocksize.go): the block_size of the latest
	// BlockStored (0: none yet), stored in the 'h' key, and the derived flag.
	eventBlockSize uint32
	bsMismatch     bool

	// pred: approximate mode's predicted device entries, router hash →
	// expiry (event time) (approx.go).
	pred map[uint64]int64

	// Active accounting aggregates (active.go).
	activeDistinct int64 // distinct active block hashes on this slot
	activeExtra    int64 // active blocks without a hash (trailing partial blocks)
	prefillTokens  int64
	localPending   int // this replica's decisions not yet read back from the log

	// With SourceLoadShares: the other writers' counting rows of this
	// (worker, rank) (sharerows.go; nil: none), and this replica's own
	// share as it last sent it (shares.go).
	peer       *peerSum
	shareDirty bool
	sent       sentShare
}

type dupKey struct {
	router uint64
	tier   Tier
}

// slotOf returns the slot of (id, rank), creating it (or reusing a freed
// one). Slots exist only for ranks something was applied for, never for
// the ranks a registration declares: memory follows what the log holds,
// not what it claims.
func (st *state) slotOf(id string, rank uint32) int32 {
	wr := workerRank{id, rank}
	if s, ok := st.slots[wr]; ok {
		return s
	}
	ws := &slotState{wr: wr, key: workerRankKey(nil, famPrefix, id, rank)}
	var s int32
	if n := len(st.free); n > 0 {
		s = st.free[n-1]
		st.free = st.free[:n-1]
		st.workers[s] = ws
	} else {
		s = int32(len(st.workers))
		st.workers = append(st.workers, ws)
		st.idx.ensureSlots(s)
	}
	st.slots[wr] = s
	st.byID[id] = append(st.byID[id], s)
	if st.shares != nil {
		ws.peer = st.shares.sums[wr] // rows that waited for the slot (sharerows.go)
	}
	if st.regs[id] == nil {
		st.unregSlots++
	}
	st.viewDirty = true
	return s
}

// slotsOf returns the slots of a worker id, by rank.
func (st *state) slotsOf(id string) []int32 {
	out := slices.Clone(st.byID[id])
	slices.SortFunc(out, func(a, b int32) int { return cmp.Compare(st.workers[a].wr.rank, st.workers[b].wr.rank) })
	return out
}

// rankLimit is the number of dp ranks a registration allows.
func rankLimit(r *pb.WorkerRegistration) uint32 { return max(r.GetDpSize(), 1) }

// queueFree asks for a slot to be freed at the end of the chunk, once its
// state has been purged (freeQueued).
func (st *state) queueFree(slot int32) { st.toFree = append(st.toFree, slot) }

// freeQueued frees the queued slots that hold nothing any more: no
// blocks, load, KV-event health, predictions or active accounting, and no active request
// entry naming them (an entry keeps its slot until it expires; the slot is
// freed by the next purge of its worker after that, or reused by its own
// id if it comes back). Called at the end of a chunk, after flushHealth,
// so that no pending write names a freed slot. A freed slot number goes
// to the next new (worker, rank): numbers never reach Pebble or the
// digest, so reuse changes nothing observable.
func (st *state) freeQueued() {
	if len(st.toFree) == 0 {
		return
	}
	referenced := map[int32]bool{}
	note := func(e *reqEntry) {
		if e.flags&fDecision != 0 {
			referenced[e.decodeSlot] = true
			if e.prefillSlot >= 0 {
				referenced[e.prefillSlot] = true
			}
		}
	}
	for _, e := range st.act.entries {
		note(e)
	}
	for _, e := range st.act.local {
		note(e)
	}
	for _, slot := range st.toFree {
		ws := st.workers[slot]
		if ws.freed || referenced[slot] || st.slots[ws.wr] != slot || ws.blocks.len() > 0 || ws.hasLoad || len(ws.pred) > 0 ||
			ws.activeDistinct != 0 || ws.activeExtra != 0 || ws.prefillTokens != 0 || ws.localPending != 0 || ws.healthDirty || !ws.healthEmpty() ||
			ws.shareDirty || ws.sent.c != (shareCounts{}) {
			continue
		}
		delete(st.slots, ws.wr)
		ids := st.byID[ws.wr.id]
		if i := slices.Index(ids, slot); i >= 0 {
			ids = slices.Delete(ids, i, i+1)
		}
		if len(ids) == 0 {
			delete(st.byID, ws.wr.id)
		} else {
			st.byID[ws.wr.id] = ids
		}
		if st.regs[ws.wr.id] == nil {
			st.unregSlots--
		}
		st.workers[slot] = &slotState{freed: true}
		st.free = append(st.free, slot)
		st.viewDirty = true
	}
	st.toFree = st.toFree[:0]
}

func (st *state) lookupSlot(id string, rank uint32) (int32, bool) {
	s, ok := st.slots[workerRank{id, rank}]
	return s, ok
}

// viewGens numbers the worker lists of every state of the process, so a
// version is never seen twice, even across a state built again.
var viewGens atomic.Uint64

// rebuildView recomputes the decider-facing worker list, sorted by (id,
// rank) so that refs never depend on the order workers were first seen.
// Called with the write lock held, after a chunk of records changed the
// registry (or a load sample changed a capacity the registry lacks).
func (st *state) rebuildView() {
	st.viewDirty = false
	st.viewGen = viewGens.Add(1)
	st.viewInfos = st.viewInfos[:0]
	st.viewSlots = st.viewSlots[:0]
	ids := make([]string, 0, len(st.regs))
	for id := range st.regs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		reg := st.regs[id]
		// Rank 0 always, and every other rank the worker has state for:
		// a rank is listed once something was applied for it (its first
		// KV event or load sample), so the list is as long as the ranks
		// actually seen, not as long as the declared dp_size.
		st.slotOf(id, 0)
		n := rankLimit(reg)
		for _, slot := range st.slotsOf(id) {
			r := st.workers[slot].wr.rank
			if r >= n {
				continue // purged at the end of the chunk (registration shrank)
			}
			info := decider.WorkerInfo{
				ID:        events.WorkerRank(id, r),
				Model:     reg.GetModel(),
				BlockSize: int(reg.GetBlockSize()),
				Unhealthy: st.unhealthy(id),
			}
			switch reg.GetPool() {
			case pb.Pool_POOL_PREFILL:
				info.Pool = decider.PoolPrefill
			case pb.Pool_POOL_DECODE:
				info.Pool = decider.PoolDecode
			}
			if reg.TotalKvBlocks != nil {
				info.TotalKVBlocks = int64(reg.GetTotalKvBlocks())
			} else if ws := st.workers[slot]; ws.hasLoad && ws.load.KvTotalBlocks != nil {
				info.TotalKVBlocks = int64(ws.load.GetKvTotalBlocks())
			}
			if reg.MaxNumBatchedTokens != nil {
				info.MaxNumBatchedTokens = int64(reg.GetMaxNumBatchedTokens())
			}
			st.viewInfos = append(st.viewInfos, info)
			st.viewSlots = append(st.viewSlots, slot)
		}
	}
	// slotRef maps a slot back to its ref, -1 when not registered.
	st.slotRef = slices.Grow(st.slotRef[:0], len(st.workers))[:len(st.workers)]
	for i := range st.slotRef {
		st.slotRef[i] = -1
	}
	for ref, slot := range st.viewSlots {
		st.slotRef[slot] = int32(ref)
	}
}
