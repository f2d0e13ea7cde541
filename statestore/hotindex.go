package statestore

import "math/bits"

// Tier is a normalized cache tier. Its values index the tier-split bitsets
// of the hot index and the per-tier counters.
type Tier uint8

const (
	TierDevice Tier = iota // GPU memory: a full hit
	TierHost               // CPU memory
	TierDisk               // local disk or remote storage
	numTiers
)

func (t Tier) String() string { return [...]string{"device", "host", "disk"}[t] }

// hotIndex maps a router block hash to the (slot, tier) pairs that hold it.
// It is the one structure the hot path reads (MatchPrefix), so it is shaped
// for memory per cached (block, worker) entry and for a chain walk that
// costs a few word operations per block whatever the number of workers.
//
// Value encoding of the holders word of a hash (hottable.go):
//   - bit 63 clear: inline, up to two holder codes, each code
//     (slot<<2 | tier) + 1 in 31 bits; 0 is "none". Most blocks are held by
//     one or two workers, and then the whole entry is one map slot.
//   - bit 63 set: the low 32 bits index a set in slab. A set is three
//     bitsets over slots (device, host, disk), `words` words each.
//
// Invariant: a set always has at least three bits set; when a removal
// leaves two or fewer, the entry goes back inline (and to zero: deleted).
// So equal content gives equal encodings, whatever the history.
type hotIndex struct {
	m     hotTable
	slab  []uint64
	free  []uint32
	words int // words per tier bitset; 64*words slots fit
	sets  int // sets in use
}

const setTag = 1 << 63

func newHotIndex() *hotIndex { return &hotIndex{words: 1} }

func code(slot int32, t Tier) uint64 { return uint64(slot)<<2 | uint64(t) + 1 }

func decode(c uint64) (int32, Tier) { c--; return int32(c >> 2), Tier(c & 3) }

func (x *hotIndex) stride() int { return 3 * x.words }

func (x *hotIndex) set(i uint32) []uint64 {
	s := x.stride()
	return x.slab[int(i)*s : int(i+1)*s]
}

// ensureSlots widens every set so that slot fits. Rare: once per 64 new
// workers.
func (x *hotIndex) ensureSlots(slot int32) {
	need := int(slot)/64 + 1
	if need <= x.words {
		return
	}
	oldStride, oldWords := x.stride(), x.words
	n := len(x.slab) / max(oldStride, 1)
	slab := make([]uint64, n*3*need)
	for i := 0; i < n; i++ {
		for t := 0; t < 3; t++ {
			copy(slab[i*3*need+t*need:], x.slab[i*oldStride+t*oldWords:i*oldStride+(t+1)*oldWords])
		}
	}
	x.slab, x.words = slab, need
}

func (x *hotIndex) allocSet() uint32 {
	x.sets++
	if n := len(x.free); n > 0 {
		i := x.free[n-1]
		x.free = x.free[:n-1]
		return i
	}
	i := uint32(len(x.slab) / x.stride())
	x.slab = append(x.slab, make([]uint64, x.stride())...)
	return i
}

func (x *hotIndex) freeSet(i uint32) {
	clear(x.set(i))
	x.free = append(x.free, i)
	x.sets--
}

func setBit(s []uint64, words int, slot int32, t Tier) {
	s[int(t)*words+int(slot)/64] |= 1 << (uint(slot) % 64)
}

func testBit(s []uint64, words int, slot int32, t Tier) bool {
	return s[int(t)*words+int(slot)/64]&(1<<(uint(slot)%64)) != 0
}

// add records that slot holds h in tier t, h's parent being up (h itself
// for a chain's first block or when unknown). It reports false when it did
// already (the caller counts duplicates: two engine hashes of one worker
// with the same router hash).
func (x *hotIndex) add(h uint64, slot int32, t Tier, up uint64) bool {
	x.ensureSlots(slot)
	c := code(slot, t)
	p := x.m.find(h)
	if p == noPos {
		x.m.insert(h, c, up)
		return true
	}
	x.m.lastP = p
	// Every holder that knows h's parent knows the same one (a router hash
	// covers its whole prefix), so a known parent only ever replaces
	// "unknown".
	if e := &x.m.ents[p]; up != h && e.up == e.h {
		e.up = up
	}
	v := &x.m.ents[p].v
	if *v&setTag != 0 {
		s := x.set(uint32(*v))
		if testBit(s, x.words, slot, t) {
			return false
		}
		setBit(s, x.words, slot, t)
		return true
	}
	lo, hi := *v&0xffffffff, *v>>32
	if lo == c || hi == c {
		return false
	}
	if hi == 0 {
		*v |= c << 32
		return true
	}
	i := x.allocSet()
	s := x.set(i)
	for _, cc := range [3]uint64{lo, hi, c} {
		sl, tt := decode(cc)
		setBit(s, x.words, sl, tt)
	}
	x.m.ents[p].v = setTag | uint64(i)
	return true
}

// remove clears (slot, t) from h and reports whether it was set.
func (x *hotIndex) remove(h uint64, slot int32, t Tier) bool {
	p := x.m.find(h)
	if p == noPos {
		return false
	}
	c := code(slot, t)
	v := x.m.ents[p].v
	if v&setTag == 0 {
		lo, hi := v&0xffffffff, v>>32
		switch c {
		case lo:
			if hi == 0 {
				x.m.del(h, p)
			} else {
				x.m.ents[p].v = hi
			}
			return true
		case hi:
			x.m.ents[p].v = lo
			return true
		}
		return false
	}
	i := uint32(v)
	s := x.set(i)
	if int(slot)/64 >= x.words || !testBit(s, x.words, slot, t) {
		return false
	}
	s[int(t)*x.words+int(slot)/64] &^= 1 << (uint(slot) % 64)
	n := 0
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	if n <= 2 {
		// Back inline, codes in ascending order (canonical encoding).
		var inl uint64
		k := 0
		for tt := Tier(0); tt < numTiers; tt++ {
			for w := 0; w < x.words; w++ {
				for b := s[int(tt)*x.words+w]; b != 0; b &= b - 1 {
					cc := code(int32(w*64+bits.TrailingZeros64(b)), tt)
					inl |= cc << (32 * k)
					k++
				}
			}
		}
		x.freeSet(i)
		if inl == 0 {
			x.m.del(h, p)
		} else {
			x.m.ents[p].v = inl
		}
	}
	return true
}

// parent returns h's parent as add recorded it, and whether h is held.
func (x *hotIndex) parent(h uint64) (uint64, bool) {
	if p := x.m.find(h); p != noPos {
		return x.m.ents[p].up, true
	}
	return 0, false
}

// bytes is the index's heap footprint: table slots and the bitset slab.
func (x *hotIndex) bytes() int {
	return x.m.bytes() + len(x.slab)*8 + len(x.free)*4
}
