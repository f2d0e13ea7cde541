package statestore

import (
	"cmp"
	"slices"

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

	load     *pb.LoadSample
	hasLoad  bool
	lastKvAt int64 // event time of the latest kv-events record, for silence checks

	// KV-event health (kvhealth.go): the first load sample's event time,
	// whether the 'h' key must be rewritten, and the derived flag.
	firstLoadAt  int64
	hasFirstLoad bool
	healthDirty  bool
	kvMissing    bool

	// pred: approximate mode's predicted device entries, router hash →
	// expiry (event time) (approx.go).
	pred map[uint64]int64

	// Active accounting aggregates (active.go).
	activeDistinct int64 // distinct active block hashes on this slot
	activeExtra    int64 // active blocks without a hash (trailing partial blocks)
	prefillTokens  int64
	localPending   int // this replica's decisions not yet read back from the log
}

type dupKey struct {
	router uint64
	tier   Tier
}

// slotOf returns the slot of (id, rank), creating it.
func (st *state) slotOf(id string, rank uint32) int32 {
	wr := workerRank{id, rank}
	if s, ok := st.slots[wr]; ok {
		return s
	}
	s := int32(len(st.workers))
	st.slots[wr] = s
	st.workers = append(st.workers, &slotState{wr: wr, key: workerRankKey(nil, famPrefix, id, rank)})
	st.idx.ensureSlots(s)
	st.viewDirty = true
	return s
}

func (st *state) lookupSlot(id string, rank uint32) (int32, bool) {
	s, ok := st.slots[workerRank{id, rank}]
	return s, ok
}

// rebuildView recomputes the decider-facing worker list, sorted by (id,
// rank) so that refs never depend on the order workers were first seen.
// Called with the write lock held, after a chunk of records changed the
// registry (or a load sample changed a capacity the registry lacks).
func (st *state) rebuildView() {
	st.viewDirty = false
	st.viewInfos = st.viewInfos[:0]
	st.viewSlots = st.viewSlots[:0]
	ids := make([]string, 0, len(st.regs))
	for id := range st.regs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		reg := st.regs[id]
		n := max(reg.GetDpSize(), 1)
		for r := uint32(0); r < n; r++ {
			slot := st.slotOf(id, r)
			info := decider.WorkerInfo{
				ID:        events.WorkerRank(id, r),
				Model:     reg.GetModel(),
				BlockSize: int(reg.GetBlockSize()),
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

// sortedSlots returns every slot ordered by (id, rank), for output that
// must not depend on the order of first sight.
func (st *state) sortedSlots() []int32 {
	out := make([]int32, len(st.workers))
	for i := range out {
		out[i] = int32(i)
	}
	slices.SortFunc(out, func(a, b int32) int {
		wa, wb := st.workers[a].wr, st.workers[b].wr
		return cmp.Or(cmp.Compare(wa.id, wb.id), cmp.Compare(wa.rank, wb.rank))
	})
	return out
}
