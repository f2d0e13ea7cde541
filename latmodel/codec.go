package latmodel

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/pdrouter/pdrouter/decider"
)

// ErrBadEntry is returned for bytes that are not an entry's encoding.
var ErrBadEntry = errors.New("latmodel: malformed entry")

// IDs returns the ids of the entries the model holds, sorted: with
// AppendEntry, what a state that keeps the model in memory hashes.
func (m *Model) IDs() []string {
	ids := make([]string, 0, len(m.entries))
	for id := range m.entries {
		ids = append(ids, id)
	}
	return sortedStrings(ids)
}

// AppendEntry appends the canonical encoding of the facts of entry id (the state's
// stored value), and false when the model holds no entry of id (the state deletes
// its key). Equal facts give equal bytes, whatever order they arrived in.
func (m *Model) AppendEntry(dst []byte, id string) ([]byte, bool) {
	e := m.entries[id]
	if e == nil {
		return dst, false
	}
	return appendEntry(dst, e), true
}

func appendEntry(dst []byte, e *entry) []byte {
	dst = append(dst, 1, e.flags)
	if e.flags&fDecision != 0 {
		dst = append(dst, byte(e.path))
		dst = binary.AppendVarint(dst, e.tD)
		for _, v := range e.x {
			dst = binary.AppendUvarint(dst, uint64(v))
		}
	}
	if e.flags&fTTFT != 0 {
		dst = binary.AppendVarint(dst, e.tT)
		dst = binary.AppendUvarint(dst, uint64(e.ttft))
	}
	if e.flags&fITL != 0 {
		dst = binary.AppendVarint(dst, e.tI)
		dst = binary.AppendUvarint(dst, uint64(e.itl))
	}
	return dst
}

// decodeEntry is the inverse of AppendEntry. It checks every bound the model relies
// on (values within 2^20, a known path, no trailing bytes), since a store's bytes are
// input like any other.
func decodeEntry(v []byte) (*entry, error) {
	if len(v) < 2 || v[0] != 1 || v[1]&^(fDecision|fTTFT|fITL) != 0 || v[1] == 0 {
		return nil, ErrBadEntry
	}
	e := &entry{flags: v[1]}
	r := v[2:]
	bad := false
	varint := func() int64 {
		x, n := binary.Varint(r)
		if n <= 0 {
			bad = true
			return 0
		}
		r = r[n:]
		return x
	}
	small := func() int64 {
		x, n := binary.Uvarint(r)
		if n <= 0 || x > decider.MaxLatencyFeature {
			bad = true
			return 0
		}
		r = r[n:]
		return int64(x)
	}
	if e.flags&fDecision != 0 {
		if len(r) == 0 || r[0] >= decider.NumPaths {
			return nil, ErrBadEntry
		}
		e.path, r = decider.LatencyPath(r[0]), r[1:]
		e.tD = varint()
		for i := range e.x {
			e.x[i] = small()
		}
		if e.x[0] != 1 {
			bad = true
		}
	}
	if e.flags&fTTFT != 0 {
		e.tT, e.ttft = varint(), small()
	}
	if e.flags&fITL != 0 {
		e.tI, e.itl = varint(), small()
	}
	// Canonical bytes only (no padded varints): equal facts, equal bytes.
	if bad || len(r) != 0 || !bytes.Equal(appendEntry(nil, e), v) {
		return nil, ErrBadEntry
	}
	return e, nil
}

// AppendSums appends the canonical encoding of the window's sums: the model bytes
// the state stores and digests. Buckets in ascending order, every accumulator as
// varints.
func (m *Model) AppendSums(dst []byte) []byte {
	dst = append(dst, 1)
	dst = binary.AppendVarint(dst, m.cur)
	for _, k := range m.sortedBuckets() {
		dst = binary.AppendVarint(dst, k)
		b := m.buckets[k]
		for p := range b.acc {
			for t := range b.acc[p] {
				a := &b.acc[p][t]
				dst = binary.AppendVarint(dst, a.n)
				for _, v := range a.xx {
					dst = binary.AppendVarint(dst, v)
				}
				for _, v := range a.xy {
					dst = binary.AppendVarint(dst, v)
				}
				dst = binary.AppendVarint(dst, a.yy)
			}
		}
	}
	return dst
}

// Restore loads an entry from its stored bytes into a model being rebuilt. Call
// Rebuilt once every entry is in: the sums are derived from the entries.
func (m *Model) Restore(id string, v []byte) error {
	e, err := decodeEntry(v)
	if err != nil {
		return err
	}
	if !m.restoreSample(id, e) {
		return nil
	}
	if !e.sampled {
		if len(m.entries) >= m.cfg.MaxEntries {
			m.stats.Full++
			return nil
		}
		m.plain++
	}
	m.entries[id] = e
	return nil
}

// Rebuilt derives the sums from the restored entries at the clock now, in id order
// (the accumulator cap is the one thing that could depend on it). Nothing is marked
// dirty except entries whose facts have left the window since they were stored.
func (m *Model) Rebuilt(now int64) {
	m.Advance(now)
	m.trimSamples()
	ids := make([]string, 0, len(m.entries))
	for id := range m.entries {
		ids = append(ids, id)
	}
	for _, id := range sortedStrings(ids) {
		m.contribute(m.entries[id])
	}
	m.sumsDty = false
	m.stats.Samples = 0
}
