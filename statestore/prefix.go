package statestore

import (
	"github.com/cockroachdb/pebble/v2"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/kvhash"
)

// Apply rules of the kv-events topic: the prefix table of each (worker,
// rank). Every rule writes the memory change and the matching Pebble
// change into the batch in one step, so the two cannot drift apart.
//
// Rules (each has a case in testdata/prefix.txt, run by TestSpec):
//
//   - BlockStored: the router hash of block i is kvhash.Chain over the
//     event's tokens, continuing from the router hash of parent_block_hash
//     (looked up in this worker's engine table, in any tier), or from the
//     start of the chain when the event has no parent.
//   - Unknown parent: the blocks are recorded as orphans: kept in the engine
//     table (so their removals are known and their children inherit the
//     status) but never indexed. Hashing them from the start of the event's
//     tokens instead would claim a cached prefix the worker does not have
//     (its KV depends on the unseen context before them), and a false hit
//     costs a wrong routing, while a missed hit only costs a prefill. A
//     later BlockStored of the same engine hash with a resolvable parent
//     replaces the orphan. Counted in pdrouter_kv_orphan_blocks_total.
//   - Repeated BlockStored (same engine hash, tier and router hash) changes
//     nothing: engines re-announce blocks. An engine hash re-stored with a
//     different router hash (an engine that reuses hashes after a restart it
//     did not announce) first drops the old block entirely.
//   - Offload store (a host or disk BlockStored without tokens, as vLLM's
//     OffloadingConnector sends): each engine hash resolves through the
//     engine table to the block the device store hashed, which gains the
//     tier; an engine hash the table does not hold is skipped and counted
//     in pdrouter_kv_store_unknown_total.
//   - BlockRemoved: clears the tier; the entry goes when no tier is left.
//     A removal of an engine hash (or tier) the worker does not hold is
//     tolerated and counted in pdrouter_kv_remove_unknown_total.
//   - AllBlocksCleared and SourceReset: drop every block of the (worker,
//     rank). UnknownEvent: ignored (its bytes stay in the log).
//   - A tier of TIER_UNSPECIFIED is the device tier: engines that do not
//     name a medium only cache on the GPU.

func normTier(t pb.Tier) Tier {
	switch t {
	case pb.Tier_TIER_HOST:
		return TierHost
	case pb.Tier_TIER_DISK:
		return TierDisk
	}
	return TierDevice
}

func (st *state) applyKv(b *pebble.Batch, rec *pb.KvEventRecord) {
	w := rec.GetWorker()
	slot := st.slotOf(w.GetWorkerId(), w.GetDpRank())
	ws := st.workers[slot]
	if t := rec.GetEventTimeUnixNano(); t > ws.lastKvAt {
		ws.lastKvAt = t
		st.markHealth(slot)
	}
	for _, e := range rec.GetEvents() {
		switch ev := e.GetEvent().(type) {
		case *pb.KvEvent_Stored:
			st.storeBlocks(b, slot, ev.Stored)
		case *pb.KvEvent_Removed:
			t := normTier(ev.Removed.GetTier())
			st.warmSink += ws.blocks.warm(ev.Removed.GetBlockHashes())
			for _, h := range ev.Removed.GetBlockHashes() {
				st.removeBlock(b, slot, h, t)
			}
		case *pb.KvEvent_Cleared:
			st.clearSlot(b, slot)
			st.stats.cleared++
		case *pb.KvEvent_SourceReset:
			st.clearSlot(b, slot)
			st.stats.resets++
		}
	}
}

func (st *state) storeBlocks(b *pebble.Batch, slot int32, s *pb.BlockStored) {
	if events.IsOffloadStore(s) {
		st.storeOffloaded(b, slot, s)
		return
	}
	ws := st.workers[slot]
	st.noteEventBlockSize(slot, s.GetBlockSize())
	tier := normTier(s.GetTier())
	orphan := false
	var parent uint64
	hasParent := false
	if s.ParentBlockHash != nil {
		r, flags, ok := ws.blocks.get(s.GetParentBlockHash())
		switch {
		case !ok || flags&flagOrphan != 0:
			orphan = true
		default:
			parent, hasParent = r, true
		}
	}
	hashes := s.GetBlockHashes()
	st.warmSink += ws.blocks.warm(hashes)
	var routers []uint64
	if !orphan {
		// Validation guarantees len(tokens) == len(hashes)*block_size.
		st.scratch = kvhash.Chain(st.scratch[:0], s.GetTokenIds(), int(s.GetBlockSize()), parent, hasParent)
		routers = st.scratch
		st.warmSink += st.idx.m.warm(routers)
	} else {
		st.stats.orphans += int64(len(hashes))
	}
	for i, h := range hashes {
		var r, up uint64
		if !orphan && i < len(routers) {
			r, up = routers[i], routers[i]
			switch {
			case i > 0:
				up = routers[i-1]
			case hasParent:
				up = parent
			}
		}
		st.storeBlock(b, slot, h, r, up, orphan, tier)
	}
	st.stats.blockOps += int64(len(hashes))
}

// storeOffloaded applies an offload store (events.IsOffloadStore): each
// engine hash is looked up in the worker's engine table and the tier is
// added to the block it names, under the router hash and parent the device
// store gave it. A hash the table does not hold is skipped and counted:
// the blocks it names cannot be hashed without their tokens, and guessing
// would credit a prefix the worker may not have. A known orphan gains the
// tier as an orphan. The event's block size is not noted: an offloaded
// block may span several device blocks.
func (st *state) storeOffloaded(b *pebble.Batch, slot int32, s *pb.BlockStored) {
	ws := st.workers[slot]
	tier := normTier(s.GetTier())
	for _, h := range s.GetBlockHashes() {
		r, flags, ok := ws.blocks.get(h)
		switch {
		case !ok:
			st.stats.storeUnknown++
		case flags&flagOrphan != 0:
			st.storeBlock(b, slot, h, r, 0, true, tier)
		default:
			up, _ := st.idx.parent(r)
			st.storeBlock(b, slot, h, r, up, false, tier)
		}
	}
	st.stats.blockOps += int64(len(s.GetBlockHashes()))
}

// storeBlock records one block; up is its parent's router hash (router
// itself for the first block of a chain, 0 for an orphan).
func (st *state) storeBlock(b *pebble.Batch, slot int32, engine, router, up uint64, orphan bool, t Tier) {
	ws := st.workers[slot]
	oldR, flags, ok := ws.blocks.get(engine)
	if ok && ((flags&flagOrphan != 0) != orphan || (!orphan && oldR != router)) {
		st.dropBlock(slot, engine, oldR, flags)
		ok, flags = false, 0
	}
	bit := uint8(1) << t
	if ok && flags&bit != 0 {
		return // idempotent re-announcement
	}
	if orphan {
		flags |= flagOrphan
	} else {
		st.indexAdd(slot, router, t, up)
	}
	flags |= bit
	ws.blocks.put(engine, router, flags)
	ws.counts[t]++
	st.tierBlocks[t]++
	st.vbuf = prefixValue(st.vbuf[:0], router, up, flags)
	st.setPrefix(b, ws.key, engine, st.vbuf, false)
}

// indexAdd and indexRemove keep the hot index and the duplicate counts:
// the bit (router, slot, tier) is set while at least one engine hash of
// the slot maps to router in tier.
func (st *state) indexAdd(slot int32, router uint64, t Tier, up uint64) {
	if !st.idx.add(router, slot, t, up) {
		ws := st.workers[slot]
		if ws.dups == nil {
			ws.dups = map[dupKey]uint32{}
		}
		ws.dups[dupKey{router, t}]++
	}
}

func (st *state) indexRemove(slot int32, router uint64, t Tier) {
	ws := st.workers[slot]
	if n := ws.dups[dupKey{router, t}]; n > 0 {
		if n == 1 {
			delete(ws.dups, dupKey{router, t})
		} else {
			ws.dups[dupKey{router, t}] = n - 1
		}
		return
	}
	st.idx.remove(router, slot, t)
}

// dropBlock removes an engine entry from memory in every tier it holds.
// The caller overwrites or deletes its Pebble key.
func (st *state) dropBlock(slot int32, engine, router uint64, flags uint8) {
	ws := st.workers[slot]
	for t := Tier(0); t < numTiers; t++ {
		if flags&(1<<t) == 0 {
			continue
		}
		if flags&flagOrphan == 0 {
			st.indexRemove(slot, router, t)
		}
		ws.counts[t]--
		st.tierBlocks[t]--
	}
	ws.blocks.del(engine)
}

func (st *state) removeBlock(b *pebble.Batch, slot int32, engine uint64, t Tier) {
	st.stats.blockOps++
	ws := st.workers[slot]
	router, flags, ok := ws.blocks.get(engine)
	bit := uint8(1) << t
	if !ok || flags&bit == 0 {
		st.stats.removeUnknown++
		return
	}
	// The rewritten value below keeps the parent, which only the hot index
	// holds: read it while the entry is certainly there.
	var up uint64
	if flags&flagOrphan == 0 {
		up, _ = st.idx.parent(router)
		st.indexRemove(slot, router, t)
	}
	ws.counts[t]--
	st.tierBlocks[t]--
	flags &^= bit
	if flags&tierMask == 0 {
		ws.blocks.del(engine)
		st.setPrefix(b, ws.key, engine, nil, true)
		return
	}
	ws.blocks.put(engine, router, flags)
	st.vbuf = prefixValue(st.vbuf[:0], router, up, flags)
	st.setPrefix(b, ws.key, engine, st.vbuf, false)
}

// clearSlot drops every block of one (worker, rank).
func (st *state) clearSlot(b *pebble.Batch, slot int32) {
	ws := st.workers[slot]
	if ws.blocks.len() > 0 {
		ws.blocks.each(func(engine, router uint64, flags uint8) {
			if flags&flagOrphan != 0 {
				return
			}
			for t := Tier(0); t < numTiers; t++ {
				if flags&(1<<t) != 0 {
					st.idx.remove(router, slot, t)
				}
			}
		})
		ws.blocks = engTable{}
	}
	ws.dups = nil
	for t := range ws.counts {
		st.tierBlocks[t] -= ws.counts[t]
		ws.counts[t] = 0
	}
	hi := append(append([]byte(nil), ws.key...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	st.deleteRange(b, ws.key, hi)
	// Predictions are not engine blocks: they stay (approx.go).
	st.restorePredictions(slot)
}

// loadBlock is the rebuild path: one prefix entry read from Pebble.
func (st *state) loadBlock(slot int32, engine, router, up uint64, flags uint8) {
	ws := st.workers[slot]
	ws.blocks.put(engine, router, flags)
	for t := Tier(0); t < numTiers; t++ {
		if flags&(1<<t) == 0 {
			continue
		}
		if flags&flagOrphan == 0 {
			st.indexAdd(slot, router, t, up)
		}
		ws.counts[t]++
		st.tierBlocks[t]++
	}
}
