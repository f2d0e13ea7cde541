package statestore

import "math/bits"

// u64map is the hot index's hash table: uint64 router hash → uint64
// holders word, open addressing with linear probing and backward-shift
// deletion. Key and value share a 16-byte slot, so one cache miss brings
// both. It exists (rather than a Go map) for the chain walk of
// MatchPrefix: the walk looks up consecutive blocks whose slots are
// random in a table much larger than the CPU caches, and loadSlots issues
// several of those loads at once so that their misses overlap (memory-level
// parallelism) instead of being paid one after the other.
//
// Key 0 is the empty marker; a real hash 0 lives in zeroVal.
type u64map struct {
	slots   []kv
	n       int
	shift   uint8
	zeroVal uint64
	hasZero bool
}

type kv struct{ k, v uint64 }

func (m *u64map) len() int {
	if m.hasZero {
		return m.n + 1
	}
	return m.n
}

func (m *u64map) home(k uint64) int { return int((k * 0x9E3779B97F4A7C15) >> m.shift) }

func (m *u64map) get(k uint64) (uint64, bool) {
	if k == 0 {
		return m.zeroVal, m.hasZero
	}
	if len(m.slots) == 0 {
		return 0, false
	}
	mask := len(m.slots) - 1
	for i := m.home(k); ; i = (i + 1) & mask {
		s := m.slots[i]
		if s.k == k {
			return s.v, true
		}
		if s.k == 0 {
			return 0, false
		}
	}
}

func (m *u64map) put(k, v uint64) {
	if k == 0 {
		m.zeroVal, m.hasZero = v, true
		return
	}
	if (m.n+1)*8 > len(m.slots)*7 {
		m.grow()
	}
	mask := len(m.slots) - 1
	for i := m.home(k); ; i = (i + 1) & mask {
		if m.slots[i].k == k {
			m.slots[i].v = v
			return
		}
		if m.slots[i].k == 0 {
			m.slots[i] = kv{k, v}
			m.n++
			return
		}
	}
}

func (m *u64map) del(k uint64) {
	if k == 0 {
		m.zeroVal, m.hasZero = 0, false
		return
	}
	if len(m.slots) == 0 {
		return
	}
	mask := len(m.slots) - 1
	i := m.home(k)
	for ; ; i = (i + 1) & mask {
		if m.slots[i].k == k {
			break
		}
		if m.slots[i].k == 0 {
			return
		}
	}
	for j := (i + 1) & mask; m.slots[j].k != 0; j = (j + 1) & mask {
		h := m.home(m.slots[j].k)
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			m.slots[i] = m.slots[j]
			i = j
		}
	}
	m.slots[i] = kv{}
	m.n--
}

func (m *u64map) grow() {
	size := 16
	if len(m.slots) > 0 {
		size = len(m.slots) * 2
	}
	old := m.slots
	m.slots = make([]kv, size)
	adviseHugePages(m.slots)
	m.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	m.n = 0
	for _, s := range old {
		if s.k != 0 {
			m.put(s.k, s.v)
		}
	}
}

// lookahead is how many chain blocks MatchPrefix loads at once.
const lookahead = 64

// loadSlots looks up keys[0:n] (n ≤ lookahead) into vals/ok. The home
// slots are all read first, in a loop of independent loads, so the CPU
// overlaps their cache misses; probing past the home slot (rare at this
// load factor) then follows.
func (m *u64map) loadSlots(keys []uint64, vals *[lookahead]uint64, ok *[lookahead]bool) {
	if len(m.slots) == 0 {
		for j := range keys {
			vals[j], ok[j] = m.get(keys[j])
		}
		return
	}
	var first [lookahead]kv
	var idx [lookahead]int
	for j, k := range keys {
		idx[j] = m.home(k)
		first[j] = m.slots[idx[j]]
	}
	// Keys past their home slot (common at this load factor) probe in
	// rounds, one slot further for all of them per round, so their loads
	// stay independent too.
	var rest [lookahead]uint8
	nr := 0
	for j, k := range keys {
		switch {
		case k == 0:
			vals[j], ok[j] = m.zeroVal, m.hasZero
		case first[j].k == k:
			vals[j], ok[j] = first[j].v, true
		case first[j].k == 0:
			vals[j], ok[j] = 0, false
		default:
			rest[nr] = uint8(j)
			nr++
		}
	}
	mask := len(m.slots) - 1
	for nr > 0 {
		n := 0
		for _, j := range rest[:nr] {
			idx[j] = (idx[j] + 1) & mask
			s := m.slots[idx[j]]
			switch s.k {
			case keys[j]:
				vals[j], ok[j] = s.v, true
			case 0:
				vals[j], ok[j] = 0, false
			default:
				rest[n] = j
				n++
			}
		}
		nr = n
	}
}

func (m *u64map) bytes() int { return len(m.slots) * 16 }

// ptr returns a pointer to k's value, valid until the next put, upsert or
// del.
func (m *u64map) ptr(k uint64) (*uint64, bool) {
	if k == 0 {
		return &m.zeroVal, m.hasZero
	}
	if len(m.slots) == 0 {
		return nil, false
	}
	mask := len(m.slots) - 1
	for i := m.home(k); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.k == k {
			return &s.v, true
		}
		if s.k == 0 {
			return nil, false
		}
	}
}

// upsert returns a pointer to k's value, inserting k with value 0 when it
// is missing (found false). The pointer is valid until the next put,
// upsert or del.
func (m *u64map) upsert(k uint64) (*uint64, bool) {
	if k == 0 {
		found := m.hasZero
		if !found {
			m.zeroVal, m.hasZero = 0, true
		}
		return &m.zeroVal, found
	}
	if (m.n+1)*8 > len(m.slots)*7 {
		m.grow()
	}
	mask := len(m.slots) - 1
	for i := m.home(k); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.k == k {
			return &s.v, true
		}
		if s.k == 0 {
			s.k = k
			m.n++
			return &s.v, false
		}
	}
}
