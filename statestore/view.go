package statestore

import (
	"math/bits"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// View is a consistent, read-only snapshot of the state for one decision:
// it implements decider.View from memory only (invariant 7). It is valid
// only inside the Store.Read callback that produced it, which holds the
// read lock; it must not be retained.
//
// Workers lists every registered (worker, rank), sorted by (id, rank), so
// refs never depend on the order in which the replica first saw workers: a
// worker's rank 0 as "id", and each other rank below its dp_size as
// "id/dpN" (events.WorkerRank) once a KV event or load sample of that rank
// was applied. Listing only ranks seen keeps the state's per-rank memory
// proportional to what the log holds, never to a declared size.
type View struct {
	st  *state
	cfg *Options
	met *Metrics // nil in tests that build a View by hand
}

var _ decider.View = View{}

// Read calls fn with a consistent view of the state and the offset vector
// (watermark) it reflects. Applies wait while fn runs, so fn must be quick:
// one decision.
func (s *Store) Read(fn func(v View)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	fn(View{st: s.st, cfg: &s.opts, met: s.met})
}

// Watermark is the offset vector the view reflects.
func (v View) Watermark() Offsets { return v.st.sortedOffsets() }

// WatermarkProto is Watermark in the decision record's form. It is shared
// by the decisions made until the next apply: read-only.
func (v View) WatermarkProto() *pb.Watermark {
	if w := v.st.wm.Load(); w != nil {
		return w
	}
	w := v.Watermark().Proto()
	v.st.wm.Store(w)
	return w
}

// Now is the state's event-time clock (Unix ns): the max event time applied.
func (v View) Now() int64 { return v.st.now }

// Workers implements decider.Registry.
func (v View) Workers() []decider.WorkerInfo { return v.st.viewInfos }

// WorkersVersion changes whenever the worker list (and the registrations
// behind it) may have changed: an index of the registrations built at one
// version holds until the version changes. It may also change when
// nothing a reader sees did.
func (v View) WorkersVersion() uint64 { return v.st.viewGen }

// Load implements decider.LoadSource: the latest sample, unless it is
// older than Options.LoadMaxAge against the event-time clock.
func (v View) Load(ref decider.WorkerRef) (decider.LoadSample, bool) {
	ls, ok := v.LoadInfo(ref)
	if !ok || (v.cfg.LoadMaxAge > 0 && ls.Age > v.cfg.LoadMaxAge) {
		return decider.LoadSample{}, false
	}
	return decider.LoadSample{KVUsedBlocks: int64(ls.Sample.GetKvUsedBlocks()), ActivePrefillTokens: int64(ls.Sample.GetActivePrefillTokens())}, true
}

// LoadInfo is the latest load sample of a worker with its event time and
// its age relative to the state's event-time clock (never the wall clock).
type LoadInfo struct {
	Sample *pb.LoadSample // read-only
	At     time.Time
	Age    time.Duration
}

// LoadInfo returns the worker's latest sample, whatever its age.
func (v View) LoadInfo(ref decider.WorkerRef) (LoadInfo, bool) {
	ws := v.st.workers[v.st.viewSlots[ref]]
	if !ws.hasLoad {
		return LoadInfo{}, false
	}
	t := ws.load.GetSampleTimeUnixNano()
	return LoadInfo{Sample: ws.load, At: time.Unix(0, t), Age: time.Duration(v.st.now - t)}, true
}

// KvSilence is how long (event time) since the worker's latest kv-events
// record, and false when it never sent one: the "load but no KV events"
// failure of conditional-disagg.md.
func (v View) KvSilence(ref decider.WorkerRef) (time.Duration, bool) {
	ws := v.st.workers[v.st.viewSlots[ref]]
	if ws.lastKvAt == 0 {
		return 0, false
	}
	return time.Duration(v.st.now - ws.lastKvAt), true
}

// Active implements decider.ActiveAccounting.
func (v View) Active(ref decider.WorkerRef) decider.ActiveLoad {
	ws := v.st.workers[v.st.viewSlots[ref]]
	a := decider.ActiveLoad{DecodeBlocks: ws.activeDistinct + ws.activeExtra, PrefillTokens: ws.prefillTokens,
		Requests: ws.activeRequests, RecentLocalPrefill: ws.recentLocal, RecentRequests: ws.recentRequests}
	if p := ws.peer; p != nil {
		// The other writers' shares (sharerows.go): each bounded, so no
		// sum overflows.
		a.DecodeBlocks += p.c[cBlocks]
		a.Requests += p.c[cRequests]
		a.PrefillTokens += p.c[cPrefill]
		a.RecentRequests += p.c[cRecentDecisions]
		a.RecentLocalPrefill += p.c[cRecentLocal]
	}
	return a
}

// Registration returns the worker's latest registration (the last one
// applied wins), for GET /v1/workers. It is shared and read-only.
func (v View) Registration(ref decider.WorkerRef) (*pb.WorkerRegistration, bool) {
	if ref < 0 || int(ref) >= len(v.st.viewSlots) {
		return nil, false
	}
	reg := v.st.regs[v.st.workers[v.st.viewSlots[ref]].wr.id]
	return reg, reg != nil
}

// RegistrationOf returns the registration of worker id, whatever its ranks:
// one map lookup, for boundaries that check every ingest call against it.
func (v View) RegistrationOf(id string) (*pb.WorkerRegistration, bool) {
	reg := v.st.regs[id]
	return reg, reg != nil
}

// BlocksHeld returns the blocks the worker holds per tier.
func (v View) BlocksHeld(ref decider.WorkerRef) [3]int64 {
	return v.st.workers[v.st.viewSlots[ref]].counts
}

// scratchPool holds the live-set words of MatchPrefix and MatchActive, so
// the hot path does not allocate.
var scratchPool = sync.Pool{New: func() any { s := make([]uint64, 0, 64); return &s }}

// liveSlots fills one bitset per tier with the slots of registered workers
// of blockSize, sets their dst rows to "whole chain" and returns the words.
func (v View) liveSlots(buf []uint64, words, sets int, blockSize int) ([]uint64, bool) {
	buf = append(buf[:0], make([]uint64, words*sets)...)
	any := false
	for ref, info := range v.st.viewInfos {
		if info.BlockSize != blockSize {
			continue
		}
		slot := v.st.viewSlots[ref]
		for k := 0; k < sets; k++ {
			buf[k*words+int(slot)/64] |= 1 << (uint(slot) % 64)
		}
		any = true
	}
	return buf, any
}

// MatchPrefix implements decider.PrefixIndex. Three nested leading runs are
// tracked per worker: on device; on device or host; in any tier. A block
// extends each run in the best tier that still continues it, and a gap in
// every tier ends the worker's match. The walk keeps one live bitset per
// run and stops when no worker is live, so it costs one map lookup and a
// few word operations per block of the longest match, for any number of
// workers; a block with the same holders as the one before (a long
// conversation held by one worker) costs one comparison.
func (v View) MatchPrefix(blockSize int, chain []uint64, dst []decider.TierOverlap) {
	st := v.st
	n := len(chain)
	for ref, info := range st.viewInfos {
		if info.BlockSize == blockSize {
			dst[ref] = decider.TierOverlap{Device: n, Host: n, Disk: n}
		}
	}
	words := st.idx.words
	bp := scratchPool.Get().(*[]uint64)
	buf, any := v.liveSlots(*bp, words, 3, blockSize)
	defer func() { *bp = buf; scratchPool.Put(bp) }()
	liveD, liveH, liveA := buf[:words], buf[words:2*words], buf[2*words:]
	end := func(ended uint64, k int, set func(o *decider.TierOverlap)) {
		for ; ended != 0; ended &= ended - 1 {
			slot := k*64 + bits.TrailingZeros64(ended)
			if slot < len(st.slotRef) {
				if ref := st.slotRef[slot]; ref >= 0 {
					set(&dst[ref])
				}
			}
		}
	}
	// The walk predicts each block's arena position from the block
	// before (hottable.go): the next entry, the one before (an arena
	// refilled from freed positions runs backwards), or where the chain
	// went on last (nx). A failed prediction
	// looks the hash up in a batch with the blocks after it, the batch
	// doubling while predictions keep failing (blocks scattered in the
	// arena), so that their cache misses overlap.
	m := &st.idx.m
	var pos [lookahead]int32
	rb, rn, batch := 0, 0, minResolve
	p := noPos
	// prev is the holders value of the block before, while it was found.
	// A block with the same value has the same holders (the index does not
	// change under the read lock), and after the block before every live
	// bit is within them: no run ends and the live sets stay as they are,
	// so the block costs one comparison. This is the common case of a long
	// conversation held by one worker, where the walk is longest.
	prev, hasPrev := uint64(0), false
	var predicted, linked, lookedUp int
	if v.met != nil {
		defer func() {
			v.met.walkPredicted.Add(float64(predicted))
			v.met.walkLinked.Add(float64(linked))
			v.met.walkLookedUp.Add(float64(lookedUp))
		}()
	}
	for i := 0; any && i < n; i++ {
		h := chain[i]
		v, ok := m.at(p+1, h)
		switch {
		case ok:
			p++
			predicted++
		case p >= 0:
			if v, ok = m.at(p-1, h); ok {
				p--
				predicted++
			} else if q := m.next(p); q != noPos {
				if v, ok = m.at(q, h); ok {
					p = q
					linked++
				}
			}
		}
		if ok {
			batch = minResolve
		} else {
			lookedUp++
			if i >= rb+rn {
				rb, rn = i, min(batch, n-i)
				m.resolve(chain[rb:rb+rn], &pos)
				batch = min(2*batch, lookahead)
			}
			if p = int(pos[i-rb]); p != noPos {
				v, ok = m.ents[p].v, true
			}
		}
		if ok && hasPrev && v == prev {
			continue
		}
		prev, hasPrev = v, ok
		// Decode the holders once per block: a bitset per tier, or up to
		// two inline (word, bit, tier) holders.
		var set []uint64
		w1, w2 := -1, -1
		var b1, b2 uint64
		var t1, t2 Tier
		if ok {
			if v&setTag != 0 {
				set = st.idx.set(uint32(v))
			} else {
				if c := v & 0xffffffff; c != 0 {
					sl, t := decode(c)
					w1, b1, t1 = int(sl)/64, 1<<(uint(sl)%64), t
				}
				if c := v >> 32; c != 0 {
					sl, t := decode(c)
					w2, b2, t2 = int(sl)/64, 1<<(uint(sl)%64), t
				}
			}
		}
		any = false
		for k := 0; k < words; k++ {
			var d, h, a uint64
			if set != nil {
				d, h, a = set[k], set[words+k], set[2*words+k]
			} else {
				if w1 == k {
					switch t1 {
					case TierDevice:
						d |= b1
					case TierHost:
						h |= b1
					default:
						a |= b1
					}
				}
				if w2 == k {
					switch t2 {
					case TierDevice:
						d |= b2
					case TierHost:
						h |= b2
					default:
						a |= b2
					}
				}
			}
			h |= d
			a |= h
			if e := liveD[k] &^ d; e != 0 {
				end(e, k, func(o *decider.TierOverlap) { o.Device = i })
			}
			if e := liveH[k] &^ h; e != 0 {
				end(e, k, func(o *decider.TierOverlap) { o.Host = i })
			}
			if e := liveA[k] &^ a; e != 0 {
				end(e, k, func(o *decider.TierOverlap) { o.Disk = i })
			}
			liveD[k] &= d
			liveH[k] &= h
			liveA[k] &= a
			any = any || liveA[k] != 0
		}
	}
	for ref, info := range st.viewInfos {
		if info.BlockSize == blockSize {
			o := dst[ref]
			dst[ref] = decider.TierOverlap{Device: o.Device, Host: o.Host - o.Device, Disk: o.Disk - o.Host}
		}
	}
}

// MatchActive implements decider.ActiveAccounting: the leading run of chain
// active on each worker of blockSize, in one walk.
func (v View) MatchActive(blockSize int, chain []uint64, dst []int) {
	st := v.st
	words := (len(st.workers) + 63) / 64
	bp := scratchPool.Get().(*[]uint64)
	live, any := v.liveSlots(*bp, words, 1, blockSize)
	defer func() { *bp = live; scratchPool.Put(bp) }()
	if !any {
		return
	}
	st.act.matchActive(chain, live, func(slot int32, n int) {
		if ref := st.slotRef[slot]; ref >= 0 {
			dst[ref] = n
		}
	})
}

// Proto converts an offset vector to the decision record's Watermark.
func (o Offsets) Proto() *pb.Watermark {
	w := &pb.Watermark{}
	var cur *pb.TopicOffsets
	for _, p := range o {
		if cur == nil || cur.Topic != string(p.Topic) {
			cur = &pb.TopicOffsets{Topic: string(p.Topic)}
			w.Topics = append(w.Topics, cur)
		}
		cur.Partitions = append(cur.Partitions, &pb.PartitionOffset{Partition: p.Partition, Offset: p.Next})
	}
	return w
}

// MemoryStats estimates the heap held by the prefix tables, for the
// pdrouter_statestore_index_bytes gauge and capacity planning (design.md,
// "Beyond one machine": bytes per cached block).
type MemoryStats struct {
	// Entries is the number of cached (block, worker, tier) entries.
	Entries int64
	// DistinctHashes is the number of router hashes in the hot index.
	DistinctHashes int64
	// HotIndexBytes: router hash → holders (map slots and bitset slab).
	HotIndexBytes int64
	// EngineTableBytes: the per-worker engine hash → router hash tables.
	EngineTableBytes int64
}

// MemoryStats returns the current estimate.
func (s *Store) MemoryStats() MemoryStats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := s.st
	ms := MemoryStats{DistinctHashes: int64(st.idx.m.len()), HotIndexBytes: int64(st.idx.bytes())}
	for _, n := range st.tierBlocks {
		ms.Entries += n
	}
	for _, ws := range st.workers {
		ms.EngineTableBytes += int64(ws.blocks.bytes())
	}
	return ms
}
