package statestore

import (
	"cmp"
	"math/bits"
	"slices"
	"unsafe"
)

// hotTable is the storage of the hot index: router hash → holders word.
// It is shaped for the chain walk of MatchPrefix:
//
//   - ents, an arena of {hash, holders, parent} entries (and nx, below,
//     beside it). An entry is placed when its hash is first stored and
//     never moves, so blocks stored together (an engine announces a
//     prompt's blocks in one event, parent first) sit next to each other,
//     in chain order. The rebuild at start lays the
//     whole arena out in chain order (relayout). The walk then predicts
//     that block i+1 is the entry after block i and checks it with one
//     load from a cache line it most likely already has: a long cached
//     prefix costs a few nanoseconds per block instead of one random
//     memory access.
//   - tab, an open-addressing table (linear probing, backward-shift
//     deletion) of 8-byte slots, fingerprint<<32 | position+1, for lookups
//     by hash: a prediction that fails, and every write. The fingerprint
//     (the hash's high 32 bits) makes a probe past a foreign slot cost no
//     arena access; the slots are half the size of {key, value} pairs, so
//     the table stays cache-friendlier at the same load.
//
// Invariants:
//   - every slot of tab names a live entry, and every live entry is named
//     by exactly one slot;
//   - a live entry has holders != 0 (the hot index deletes a hash whose
//     last holder goes), and a free entry has holders == 0. So "ents[p].h
//     == h && ents[p].v != 0" proves that p is h's entry, without tab: a
//     hash has at most one live entry.
type hotTable struct {
	tab   []uint64
	shift uint8
	n     int // live entries
	ents  []hotEntry
	// nx[p] is 1 + the position of the entry last inserted as a child of
	// ents[p] (0: none): where a chain went on when it was not stored in one
	// piece (an engine stores a conversation's blocks over many events,
	// interleaved with other requests'). The walk follows it when the next
	// entry is not the next block, one load instead of a table lookup.
	// It is a hint: the walk confirms it like any prediction.
	nx   []uint32
	free []uint32 // free arena positions, reused last-freed first
	// lastP is the entry the writer last found or inserted (hotIndex.add).
	// Blocks are stored parent first, so it is usually the parent of the
	// next insert. Only the writer touches it: find, which readers call
	// under the read lock, must not.
	lastP int
	// loading skips the nx links while the rebuild fills the table in
	// Pebble's order: relayout recomputes them, so the parent lookups
	// would be wasted.
	loading bool
}

// hotEntry is one router hash. up is its parent's router hash, or h
// itself when the hash starts a chain or its parent is not known (a
// prediction restored at start); it only guides relayout and the value
// removeBlock rewrites, never a decision.
type hotEntry struct{ h, v, up uint64 }

// noPos is the position of a hash that is not in the table.
const noPos = -1

func fingerprint(h uint64) uint64 { return h >> 32 }

func (m *hotTable) home(h uint64) int { return int((h * 0x9E3779B97F4A7C15) >> m.shift) }

func (m *hotTable) len() int { return m.n }

// find returns h's arena position, or noPos.
func (m *hotTable) find(h uint64) int {
	if len(m.tab) == 0 {
		return noPos
	}
	fp, mask := fingerprint(h), len(m.tab)-1
	for i := m.home(h); ; i = (i + 1) & mask {
		s := m.tab[i]
		if s == 0 {
			return noPos
		}
		if s>>32 == fp {
			if p := int(uint32(s)) - 1; m.ents[p].h == h {
				return p
			}
		}
	}
}

// at returns the holders of the live entry at p, when p holds h. The walk
// uses it to confirm a predicted position.
func (m *hotTable) at(p int, h uint64) (uint64, bool) {
	if uint(p) >= uint(len(m.ents)) {
		return 0, false
	}
	e := m.ents[p]
	return e.v, e.h == h && e.v != 0
}

// insert adds h, which must be missing, with holders v != 0 and parent
// up, and returns its position.
func (m *hotTable) insert(h, v, up uint64) int {
	if (m.n+1)*8 > len(m.tab)*7 {
		m.grow()
	}
	// The parent's position, for its nx link: the previous insert in a
	// chain stored parent first, otherwise a lookup.
	parent := noPos
	if up != h && !m.loading {
		if _, ok := m.at(m.lastP, up); ok {
			parent = m.lastP
		} else {
			parent = m.find(up)
		}
	}
	var p int
	if k := len(m.free); k > 0 {
		p = int(m.free[k-1])
		m.free = m.free[:k-1]
	} else {
		if len(m.ents) == cap(m.ents) {
			m.ents = growArena(m.ents)
		}
		p = len(m.ents)
		m.ents = m.ents[:p+1]
		m.nx = append(m.nx, 0)
	}
	m.ents[p] = hotEntry{h, v, up}
	m.nx[p] = 0
	if parent != noPos {
		m.nx[parent] = uint32(p + 1)
	}
	m.place(h, p)
	m.n++
	m.lastP = p
	return p
}

// next returns the position nx links from p, or noPos.
func (m *hotTable) next(p int) int {
	if uint(p) >= uint(len(m.nx)) {
		return noPos
	}
	return int(m.nx[p]) - 1
}

// place puts the slot of h → p into tab (h is not in it).
func (m *hotTable) place(h uint64, p int) {
	mask := len(m.tab) - 1
	i := m.home(h)
	for m.tab[i] != 0 {
		i = (i + 1) & mask
	}
	m.tab[i] = fingerprint(h)<<32 | uint64(p+1)
}

// del removes h, which must be present at position p, and frees p.
func (m *hotTable) del(h uint64, p int) {
	mask := len(m.tab) - 1
	i := m.home(h)
	for uint32(m.tab[i]) != uint32(p+1) {
		i = (i + 1) & mask
	}
	// Backward-shift deletion: move later slots of the probe run into the
	// hole when their home allows it, so no tombstones are needed.
	for j := (i + 1) & mask; m.tab[j] != 0; j = (j + 1) & mask {
		hj := m.home(m.ents[uint32(m.tab[j])-1].h)
		if (j > i && (hj <= i || hj > j)) || (j < i && hj <= i && hj > j) {
			m.tab[i] = m.tab[j]
			i = j
		}
	}
	m.tab[i] = 0
	m.ents[p] = hotEntry{}
	m.nx[p] = 0
	m.free = append(m.free, uint32(p))
	m.n--
}

// grow doubles tab. It walks the arena, not the old table, so its reads
// are sequential.
func (m *hotTable) grow() {
	size := 16
	if len(m.tab) > 0 {
		size = len(m.tab) * 2
	}
	m.tab = make([]uint64, size)
	adviseHugePages(m.tab)
	m.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	for p, e := range m.ents {
		if e.v != 0 {
			m.place(e.h, p)
		}
	}
}

// growArena returns ents with room for more, advised for huge pages.
func growArena(ents []hotEntry) []hotEntry {
	n := max(64, cap(ents)+cap(ents)/2)
	out := make([]hotEntry, len(ents), n)
	adviseHugePages(out[:n])
	copy(out, ents)
	return out
}

// relayout moves the arena into chain order: a depth-first walk of the
// forest of parent links, each hash right after its parent where it is
// the first child walked. The rebuild at start runs it, because Pebble
// returns a worker's blocks in engine-hash order, which is random. Hashes
// whose parent is not in the table start trees; a parent cycle (only a
// hash collision could make one) leaves its hashes to the end, in arena
// order. Positions change: callers hold none across it.
func (m *hotTable) relayout() {
	// links: every live entry as (parent, hash, old position), sorted by
	// parent, so an entry's children are one contiguous run.
	type link struct {
		up, h uint64
		pos   uint32
	}
	links := make([]link, 0, m.n)
	for p, e := range m.ents {
		if e.v != 0 {
			links = append(links, link{e.up, e.h, uint32(p)})
		}
	}
	slices.SortFunc(links, func(a, b link) int {
		if c := cmp.Compare(a.up, b.up); c != 0 {
			return c
		}
		return cmp.Compare(a.h, b.h)
	})
	// kids[p] is the run of links of the entry at old position p's
	// children; a run whose parent is not in the table starts trees.
	kids := make([][2]int32, len(m.ents))
	var roots []uint32
	for i := 0; i < len(links); {
		j := i + 1
		for j < len(links) && links[j].up == links[i].up {
			j++
		}
		if p := m.find(links[i].up); p != noPos {
			kids[p] = [2]int32{int32(i), int32(j)}
		} else {
			for _, l := range links[i:j] {
				roots = append(roots, l.pos)
			}
		}
		i = j
	}
	for _, l := range links {
		if l.up == l.h {
			roots = append(roots, l.pos)
		}
	}
	// The new arena, in depth-first order; nx links each parent to its
	// last child placed. The table is built after, in one pass.
	ents := make([]hotEntry, 0, m.n)
	adviseHugePages(ents[:cap(ents)])
	nx := make([]uint32, 0, m.n)
	moved := make([]bool, len(m.ents)) // by old position
	type item struct {
		old    uint32
		parent int // new position of the parent, noPos for a root
	}
	var stack []item
	visit := func(root uint32) {
		stack = append(stack[:0], item{root, noPos})
		for len(stack) > 0 {
			it := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if moved[it.old] {
				continue
			}
			moved[it.old] = true
			p := len(ents)
			e := m.ents[it.old]
			ents, nx = append(ents, e), append(nx, 0)
			if it.parent != noPos {
				nx[it.parent] = uint32(p + 1)
			}
			cs := links[kids[it.old][0]:kids[it.old][1]]
			for k := len(cs) - 1; k >= 0; k-- {
				if cs[k].h != e.h {
					stack = append(stack, item{cs[k].pos, p})
				}
			}
		}
	}
	for _, r := range roots {
		visit(r)
	}
	for _, l := range links {
		if !moved[l.pos] { // in a parent cycle
			visit(l.pos)
		}
	}
	fresh := hotTable{ents: ents, nx: nx, n: len(ents), lastP: noPos}
	size := 16
	for size*7 < len(ents)*8 {
		size *= 2
	}
	fresh.tab = make([]uint64, size)
	adviseHugePages(fresh.tab)
	fresh.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	for p, e := range ents {
		fresh.place(e.h, p)
	}
	*m = fresh
}

func (m *hotTable) bytes() int {
	return len(m.tab)*8 + cap(m.ents)*int(unsafe.Sizeof(hotEntry{})) + cap(m.nx)*4 + cap(m.free)*4
}

// lookahead is how many chain blocks MatchPrefix resolves at once, so that
// their cache misses overlap.
const lookahead = 64

// resolve looks up keys (at most lookahead) into pos. The home slots of all
// keys are read first, in a loop of independent loads, so the CPU overlaps
// their cache misses; then the arena entries they name, again all at once.
// Keys past their home slot (uncommon) fall back to find.
func (m *hotTable) resolve(keys []uint64, pos *[lookahead]int32) {
	if len(m.tab) == 0 {
		for j := range keys {
			pos[j] = noPos
		}
		return
	}
	var first [lookahead]uint64
	for j, k := range keys {
		first[j] = m.tab[m.home(k)]
	}
	for j, k := range keys {
		s := first[j]
		switch {
		case s == 0:
			pos[j] = noPos
		case s>>32 == fingerprint(k) && m.ents[uint32(s)-1].h == k:
			pos[j] = int32(uint32(s)) - 1
		default:
			pos[j] = int32(m.find(k))
		}
	}
}

// minResolve is the first batch the walk looks up after a failed
// prediction: one, because the next prediction usually succeeds again (a
// jump between two runs of the arena); the batch doubles only while
// predictions keep failing.
const minResolve = 1

// warm reads the table slots of hashes hs (engTable.warm says why).
func (m *hotTable) warm(hs []uint64) uint64 {
	if len(m.tab) == 0 {
		return 0
	}
	var s uint64
	for _, h := range hs {
		s += m.tab[m.home(h)]
	}
	return s
}
