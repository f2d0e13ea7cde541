package memview

import "slices"

// blockIndex maps block hashes to the sets of workers holding them, with one bitset per
// tier. It is laid out for the prefix walk rather than for updates:
//
//   - entries and their bitsets live in flat slices, so that a walk reads memory
//     sequentially instead of chasing a pointer per block;
//   - each entry remembers the entry stored right after it (next), so that walking a
//     chain that was stored as a run costs one comparison per block instead of one hash
//     lookup. The hint is checked against the hash, so a stale or wrong hint only costs a
//     fallback to the map. Chained hashes make this the common case: a prompt's blocks
//     are stored, and matched, in order;
//   - each entry knows whether its bitsets equal those of the entry before it
//     (sameAsPrev). A walk that steps from entry i-1 to entry i, as it does along a
//     stored run, then knows that no run ends at that block without reading the sets.
type blockIndex struct {
	tiers   int
	words   int // bitset words per tier; grows with the worker count
	index   map[uint64]int32
	entries []entry
	sets    []uint64 // entry i, tier t, word k at ((i*tiers)+t)*words + k
}

type entry struct {
	hash       uint64
	next       int32 // entry stored right after this one, or -1
	sameAsPrev bool  // the bitsets equal those of entry index-1
}

func newBlockIndex(tiers int) *blockIndex {
	return &blockIndex{tiers: tiers, words: 1, index: map[uint64]int32{}}
}

// fit re-lays the bitsets out when the worker count needs more words per set.
func (x *blockIndex) fit(workers int) {
	words := max(1, (workers+63)/64)
	if words <= x.words {
		return
	}
	sets := make([]uint64, len(x.entries)*x.tiers*words)
	for i := range len(x.entries) * x.tiers {
		copy(sets[i*words:], x.sets[i*x.words:(i+1)*x.words])
	}
	x.sets, x.words = sets, words
}

// entryFor returns the entry of a hash, creating it.
func (x *blockIndex) entryFor(h uint64) int32 {
	if e, ok := x.index[h]; ok {
		return e
	}
	e := int32(len(x.entries))
	x.index[h] = e
	x.entries = append(x.entries, entry{hash: h, next: -1})
	x.sets = append(x.sets, make([]uint64, x.tiers*x.words)...)
	x.refreshSame(e)
	return e
}

// entrySets returns all bitsets of an entry.
func (x *blockIndex) entrySets(e int32) []uint64 {
	n := x.tiers * x.words
	return x.sets[int(e)*n : int(e)*n+n]
}

// refreshSame recomputes sameAsPrev for e and for the entry after it, after e's sets
// changed.
func (x *blockIndex) refreshSame(e int32) {
	for _, i := range [2]int32{e, e + 1} {
		if i > 0 && int(i) < len(x.entries) {
			x.entries[i].sameAsPrev = slices.Equal(x.entrySets(i-1), x.entrySets(i))
		}
	}
}

// set marks a run of blocks as held by ref in a tier, linking each block to the next.
func (x *blockIndex) set(hashes []uint64, tier, ref int) {
	prev := int32(-1)
	for _, h := range hashes {
		e := x.entryFor(h)
		x.sets[(int(e)*x.tiers+tier)*x.words+ref/64] |= 1 << (uint(ref) % 64)
		x.refreshSame(e)
		if prev >= 0 {
			x.entries[prev].next = e
		}
		prev = e
	}
}

// unset clears ref from the blocks in a tier. Entries are never deleted, which is fine
// for a test fixture.
func (x *blockIndex) unset(hashes []uint64, tier, ref int) {
	for _, h := range hashes {
		if e, ok := x.index[h]; ok {
			x.sets[(int(e)*x.tiers+tier)*x.words+ref/64] &^= 1 << (uint(ref) % 64)
			x.refreshSame(e)
		}
	}
}

// find returns the entry of h, trying first the entry created right after prev (blocks
// stored in one run get consecutive entries, and the next address needs no load to
// compute), then prev's successor hint, then the map; -1 if absent.
func (x *blockIndex) find(prev int32, h uint64) int32 {
	if prev >= 0 {
		if n := prev + 1; int(n) < len(x.entries) && x.entries[n].hash == h {
			return n
		}
		if n := x.entries[prev].next; n >= 0 && x.entries[n].hash == h {
			return n
		}
	}
	if e, ok := x.index[h]; ok {
		return e
	}
	return -1
}
