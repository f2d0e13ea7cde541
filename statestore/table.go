package statestore

import "math/bits"

// engTable maps a worker's engine block hashes to the router hash and tier
// flags of each block. It is an open-addressing table with linear probing
// and backward-shift deletion, in three parallel arrays (8 + 8 + 1 bytes a
// slot). A Go map of the same content needs a 16-byte value (router hash
// plus flags, padded) and so about 8 more bytes per block; with one such
// entry per cached (block, worker) this is the larger part of a replica's
// memory, which is why it is hand-rolled.
//
// meta[i] == 0 marks a free slot; a used slot holds the entry's flags with
// metaUsed set, so flags themselves never need a bit for "used".
type engTable struct {
	keys   []uint64
	router []uint64
	meta   []uint8
	n      int
	shift  uint8 // 64 - log2(len(keys))
}

const metaUsed = 0x40

func (t *engTable) len() int { return t.n }

// home is the preferred slot of k: a multiplicative hash, because engine
// hashes may be small sequential integers (some engines number blocks).
func (t *engTable) home(k uint64) int {
	return int((k * 0x9E3779B97F4A7C15) >> t.shift)
}

func (t *engTable) find(k uint64) int {
	if len(t.keys) == 0 {
		return -1
	}
	mask := len(t.keys) - 1
	for i := t.home(k); ; i = (i + 1) & mask {
		if t.meta[i] == 0 {
			return -1
		}
		if t.keys[i] == k {
			return i
		}
	}
}

// get returns the router hash and flags stored for engine hash k.
func (t *engTable) get(k uint64) (router uint64, flags uint8, ok bool) {
	i := t.find(k)
	if i < 0 {
		return 0, 0, false
	}
	return t.router[i], t.meta[i] &^ metaUsed, true
}

// put inserts or replaces k. flags must fit in the bits metaUsed leaves.
func (t *engTable) put(k, router uint64, flags uint8) {
	if (t.n+1)*8 > len(t.keys)*7 { // load factor 7/8
		t.grow()
	}
	mask := len(t.keys) - 1
	for i := t.home(k); ; i = (i + 1) & mask {
		if t.meta[i] == 0 {
			t.keys[i], t.router[i], t.meta[i] = k, router, flags|metaUsed
			t.n++
			return
		}
		if t.keys[i] == k {
			t.router[i], t.meta[i] = router, flags|metaUsed
			return
		}
	}
}

// del removes k, shifting later members of its probe run back so that every
// lookup still finds its key without tombstones.
func (t *engTable) del(k uint64) bool {
	i := t.find(k)
	if i < 0 {
		return false
	}
	mask := len(t.keys) - 1
	for j := (i + 1) & mask; t.meta[j] != 0; j = (j + 1) & mask {
		h := t.home(t.keys[j])
		// Move j into the hole at i when its home is not in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			t.keys[i], t.router[i], t.meta[i] = t.keys[j], t.router[j], t.meta[j]
			i = j
		}
	}
	t.meta[i] = 0
	t.n--
	if t.n == 0 {
		*t = engTable{}
	}
	return true
}

func (t *engTable) grow() {
	size := 8
	if len(t.keys) > 0 {
		size = len(t.keys) * 2
	}
	old := *t
	t.keys = make([]uint64, size)
	t.router = make([]uint64, size)
	t.meta = make([]uint8, size)
	t.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	t.n = 0
	for i, m := range old.meta {
		if m != 0 {
			t.put(old.keys[i], old.router[i], m&^metaUsed)
		}
	}
}

// each calls fn for every entry, in slot order. Slot order depends on the
// insertion history, so callers must not let it reach state or output.
func (t *engTable) each(fn func(engine, router uint64, flags uint8)) {
	for i, m := range t.meta {
		if m != 0 {
			fn(t.keys[i], t.router[i], m&^metaUsed)
		}
	}
}

// bytes is the table's heap footprint.
func (t *engTable) bytes() int { return len(t.keys) * 17 }

// warm reads the home slots of engine hashes ks and returns a value that
// depends on what it read. An event names its blocks together, and the
// lookup of a random hash in a large table is a cache miss: reads that do
// not depend on each other are in flight at once, so the lookups that
// follow find their lines arriving, where one after another each would
// wait for its own.
func (t *engTable) warm(ks []uint64) uint64 {
	if len(t.keys) == 0 {
		return 0
	}
	var s uint64
	for _, k := range ks {
		i := t.home(k)
		s += t.keys[i] + t.router[i] + uint64(t.meta[i])
	}
	return s
}
