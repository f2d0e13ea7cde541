package statestore

import (
	"encoding/binary"
	"encoding/hex"

	"github.com/zeebo/xxh3"
)

// Digest identifies a state: XXH3-128 over every key and value of the
// store in key order, offsets and clocks included.
//
// Why the keyspace and not memory: Pebble iterates in key order, so the
// hash needs no sorting and cannot depend on Go map order; and the
// keyspace is canonical (keys.go: worker ids, never slots; values that
// depend only on the facts, never on the order they arrived in). Two
// replicas with the same offset vector therefore have the same bytes, and
// the digest proves it (invariants 1 and 3). It reflects the last
// committed batch.
type Digest struct {
	Hash    [16]byte
	Keys    int64
	Offsets Offsets
}

func (d Digest) String() string { return hex.EncodeToString(d.Hash[:]) }

// Digest computes the digest of the committed state. It reads the whole
// store (about a second per million keys); it is for tools, tests and
// GET /v1/state, not for the hot path.
func (s *Store) Digest() (Digest, error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	it, err := snap.NewIter(nil)
	if err != nil {
		return Digest{}, err
	}
	defer it.Close()
	h := xxh3.New()
	var d Digest
	var n [binary.MaxVarintLen64]byte
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) > 0 && k[0] == famOffset {
			if t, p, err := parseOffsetKey(k[1:]); err == nil && len(v) == 8 {
				d.Offsets = append(d.Offsets, PartitionOffset{t, p, int64(binary.LittleEndian.Uint64(v))})
			}
		}
		_, _ = h.Write(n[:binary.PutUvarint(n[:], uint64(len(k)))])
		_, _ = h.Write(k)
		_, _ = h.Write(n[:binary.PutUvarint(n[:], uint64(len(v)))])
		_, _ = h.Write(v)
		d.Keys++
	}
	if err := it.Error(); err != nil {
		return Digest{}, err
	}
	d.Hash = h.Sum128().Bytes()
	sortOffsets(d.Offsets)
	return d, nil
}
