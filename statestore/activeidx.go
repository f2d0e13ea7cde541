package statestore

import (
	"math/bits"
	"slices"
)

// activeIndex is active accounting's per-block table (active.go): for each
// block hash active on some slot, the slots that carry it, each with a
// refcount (how many of the requests it carries have the hash in their
// chain). It answers "is (hash, slot) active" for MatchActive and counts a
// slot's distinct active hashes as (hash, slot) pairs come and go.
//
// Every decision adds or removes its whole chain (up to thousands of
// blocks), so this is the hot loop of accounting. It is one open-addressing
// table (u64map) keyed by the hash: one probe per block, no allocation per
// block. A hash carried by one slot is inline in the table's value; a hash
// on two or more slots points to a holder set: its bitset in a slab of
// fixed-stride words (MatchActive reads only that, one access after the
// table's), and its refcounts in slot order. Memory only, derived from the
// entries: never reaches Pebble or the digest, and no iteration order
// reaches state.
//
// The table is split in aiShards shards by hash, so that growing one (a
// rehash, under the store's write lock) moves a small part of the entries,
// never millions at once: the pause stays short at any size. A chain is
// added in batches whose table slots are touched first, so that the cache
// misses of a batch overlap (the table is much larger than the CPU caches).
type activeIndex struct {
	shards [aiShards]u64map
	// Holder sets: set i has bitset words[i*stride:(i+1)*stride] and the
	// refcount of each holder, in slot order, in counts[i] (a slot's count
	// is at its rank in the bitset).
	stride int
	words  []uint64
	counts [][]uint32
	free   []uint32 // unused holder sets
	n      int      // distinct hashes
	sink   uint64   // keeps the touching loads alive
}

const aiShardBits = 12
const aiShards = 1 << aiShardBits

// shard picks a shard from other bits than u64map.home uses.
func (x *activeIndex) shard(h uint64) *u64map {
	h ^= h >> 31
	h *= 0x7fb5d329728ea185
	return &x.shards[h>>(64-aiShardBits)]
}

// set returns the bitset of holder set i.
func (x *activeIndex) set(i uint32) []uint64 {
	return x.words[int(i)*x.stride : (int(i)+1)*x.stride]
}

// fit widens the stride so that the bitsets hold slot.
func (x *activeIndex) fit(slot int32) {
	need := int(slot)/64 + 1
	if need <= x.stride {
		return
	}
	n := len(x.counts)
	words := make([]uint64, n*need, max(cap(x.words)/max(x.stride, 1), n)*need)
	for i := 0; i < n; i++ {
		copy(words[i*need:], x.words[i*x.stride:(i+1)*x.stride])
	}
	x.words, x.stride = words, need
}

// rank is the number of holders of set i below slot.
func (x *activeIndex) rank(i uint32, slot int32) int {
	b := x.set(i)
	w, r := int(slot)/64, 0
	for k := 0; k < w && k < len(b); k++ {
		r += bits.OnesCount64(b[k])
	}
	if w < len(b) {
		r += bits.OnesCount64(b[w] & (1<<(uint(slot)%64) - 1))
	}
	return r
}

func (x *activeIndex) has(i uint32, slot int32) bool {
	w := int(slot) / 64
	return w < x.stride && x.words[int(i)*x.stride+w]&(1<<(uint(slot)%64)) != 0
}

// insert adds slot, not held, with count n to set i.
func (x *activeIndex) insert(i uint32, slot int32, n uint32) {
	x.fit(slot)
	x.counts[i] = slices.Insert(x.counts[i], x.rank(i, slot), n)
	x.words[int(i)*x.stride+int(slot)/64] |= 1 << (uint(slot) % 64)
}

// touch loads the home slot of each hash, so the misses of a batch are
// paid together; the following updates then find the lines in cache.
func (x *activeIndex) touch(hs []uint64) {
	var acc uint64
	for _, h := range hs {
		if m := x.shard(h); len(m.slots) > 0 {
			acc ^= m.slots[m.home(h)].k
		}
	}
	x.sink ^= acc
}

// addChain counts one more request carrying every hash of chain on slot
// and returns how many (hash, slot) pairs are new.
func (x *activeIndex) addChain(chain []uint64, slot int32) int64 {
	n := int64(0)
	for base := 0; base < len(chain); base += aiBatch {
		batch := chain[base:min(base+aiBatch, len(chain))]
		x.touch(batch)
		for _, h := range batch {
			if x.add(h, slot) {
				n++
			}
		}
	}
	return n
}

// removeChain undoes addChain and returns how many pairs are gone.
func (x *activeIndex) removeChain(chain []uint64, slot int32) int64 {
	n := int64(0)
	for base := 0; base < len(chain); base += aiBatch {
		batch := chain[base:min(base+aiBatch, len(chain))]
		x.touch(batch)
		for _, h := range batch {
			if x.remove(h, slot) {
				n++
			}
		}
	}
	return n
}

const aiBatch = 32

// aiMaxLoad: the shards grow at 1/aiMaxLoad full. Linear probing is cheap
// at half full (a miss probes 2.5 slots on average) and slow near the
// u64map default of 7/8 (32): MatchActive looks up many missing hashes.
const aiMaxLoad = 2

// Value layout: bit 63 set: a holder set's index in the low 32 bits. Clear: one
// holder, slot+1 in bits 0–30 and its refcount in bits 31–62.
const (
	aiOvf       = uint64(1) << 63
	aiSlotMask  = uint64(1)<<31 - 1
	aiCountUnit = uint64(1) << 31
)

func aiInline(slot int32, n uint64) uint64 { return uint64(slot+1) | n<<31 }

func aiSlot(v uint64) int32 { return int32(v&aiSlotMask) - 1 }

func aiCount(v uint64) uint64 { return (v &^ aiOvf) >> 31 }

// add counts one more request carrying h on slot, and reports whether the
// pair is new (the slot's distinct hashes grow by one).
func (x *activeIndex) add(h uint64, slot int32) bool {
	m := x.shard(h)
	if (m.n+1)*aiMaxLoad > len(m.slots) {
		m.grow()
	}
	p, found := m.upsert(h)
	if !found {
		*p = aiInline(slot, 1)
		x.n++
		return true
	}
	v := *p
	if v&aiOvf == 0 {
		if aiSlot(v) == slot && aiCount(v) < 1<<32-1 {
			*p = v + aiCountUnit
			return false
		}
		// A second holder: move to a holder list. p stays valid: the
		// table is not touched until the write.
		i := x.newHolders()
		x.insert(i, aiSlot(v), uint32(aiCount(v)))
		x.insert(i, slot, 1)
		*p = aiOvf | uint64(i)
		return true
	}
	i := uint32(v)
	if x.has(i, slot) {
		x.counts[i][x.rank(i, slot)]++
		return false
	}
	x.insert(i, slot, 1)
	return true
}

// remove counts one request less carrying h on slot, and reports whether
// the pair is gone (the slot's distinct hashes shrink by one). Removing a
// pair that is not there is a no-op (it cannot happen: contributions are
// removed exactly as they were added).
func (x *activeIndex) remove(h uint64, slot int32) bool {
	m := x.shard(h)
	p, found := m.ptr(h)
	if !found {
		return false
	}
	v := *p
	if v&aiOvf == 0 {
		if aiSlot(v) != slot {
			return false
		}
		if aiCount(v) > 1 {
			*p = v - aiCountUnit
			return false
		}
		m.del(h)
		x.n--
		return true
	}
	i := uint32(v)
	if !x.has(i, slot) {
		return false
	}
	r := x.rank(i, slot)
	c := x.counts[i]
	if c[r] > 1 {
		c[r]--
		return false
	}
	x.counts[i] = slices.Delete(c, r, r+1)
	b := x.set(i)
	b[int(slot)/64] &^= 1 << (uint(slot) % 64)
	if len(x.counts[i]) == 1 {
		// One holder left: inline again.
		for k, w := range b {
			if w != 0 {
				*p = aiInline(int32(k*64+bits.TrailingZeros64(w)), uint64(x.counts[i][0]))
			}
		}
		x.freeHolders(i)
	}
	return true
}

func (x *activeIndex) newHolders() uint32 {
	if n := len(x.free); n > 0 {
		i := x.free[n-1]
		x.free = x.free[:n-1]
		return i
	}
	x.counts = append(x.counts, make([]uint32, 0, 4))
	x.words = append(x.words, make([]uint64, x.stride)...)
	return uint32(len(x.counts) - 1)
}

func (x *activeIndex) freeHolders(i uint32) {
	x.counts[i] = x.counts[i][:0]
	clear(x.set(i))
	x.free = append(x.free, i)
}

// word returns word k of the holder bitset of a table value.
func (x *activeIndex) word(v uint64, k int) uint64 {
	if v&aiOvf != 0 {
		if k < x.stride {
			return x.words[int(uint32(v))*x.stride+k]
		}
		return 0
	}
	if s := aiSlot(v); int(s)/64 == k {
		return 1 << (uint(s) % 64)
	}
	return 0
}

// len is the number of distinct active hashes.
func (x *activeIndex) len() int { return x.n }

// lookup is u64map.loadSlots over the shards: the home slots of all keys
// are read first, in a loop of independent loads.
func (x *activeIndex) lookup(keys []uint64, vals *[lookahead]uint64, oks *[lookahead]bool) {
	var first [lookahead]kv
	for j, k := range keys {
		if m := x.shard(k); len(m.slots) > 0 {
			first[j] = m.slots[m.home(k)]
		}
	}
	for j, k := range keys {
		switch {
		case k != 0 && first[j].k == k:
			vals[j], oks[j] = first[j].v, true
		case k != 0 && first[j].k == 0:
			vals[j], oks[j] = 0, false
		default:
			vals[j], oks[j] = x.shard(k).get(k)
		}
	}
}

// matchActive is MatchActive over slots: the leading run of chain active on
// each live slot. live is consumed. Chain blocks are looked up lookahead at
// a time (u64map.loadSlots), so their cache misses overlap.
func (x *activeIndex) matchActive(chain []uint64, live []uint64, runs func(slot int32, n int)) {
	var vals [lookahead]uint64
	var oks [lookahead]bool
	// The first lookups are few: most walks end within the shared prefix.
	for base, step := 0, 8; base < len(chain); base, step = base+step, min(step*2, lookahead) {
		batch := chain[base:min(base+step, len(chain))]
		x.lookup(batch, &vals, &oks)
		for j := range batch {
			i := base + j
			any := false
			for k := range live {
				var w uint64
				if oks[j] {
					w = x.word(vals[j], k)
				}
				for ended := live[k] &^ w; ended != 0; ended &= ended - 1 {
					runs(int32(k*64+bits.TrailingZeros64(ended)), i)
				}
				live[k] &= w
				any = any || live[k] != 0
			}
			if !any {
				return
			}
		}
	}
	for k := range live {
		for rest := live[k]; rest != 0; rest &= rest - 1 {
			runs(int32(k*64+bits.TrailingZeros64(rest)), len(chain))
		}
	}
}
