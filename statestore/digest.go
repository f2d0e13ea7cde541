package statestore

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"time"

	"github.com/cockroachdb/pebble/v2"

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
	snap, open, err := s.digestView()
	if err != nil {
		return Digest{}, err
	}
	defer snap.Close()
	it, err := snap.NewIter(nil)
	if err != nil {
		return Digest{}, err
	}
	defer it.Close()
	h := xxh3.New()
	var d Digest
	var n [binary.MaxVarintLen64]byte
	add := func(k, v []byte) {
		_, _ = h.Write(n[:binary.PutUvarint(n[:], uint64(len(k)))])
		_, _ = h.Write(k)
		_, _ = h.Write(n[:binary.PutUvarint(n[:], uint64(len(v)))])
		_, _ = h.Write(v)
		d.Keys++
	}
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) > 0 && k[0] == famOpen {
			continue // a checkpoint: the open requests are hashed from memory
		}
		if len(k) > 0 && k[0] == famOffset {
			if t, p, err := parseOffsetKey(k[1:]); err == nil && len(v) == 8 {
				d.Offsets = append(d.Offsets, PartitionOffset{t, p, int64(binary.LittleEndian.Uint64(v))})
			}
		}
		add(k, v)
	}
	if err := it.Error(); err != nil {
		return Digest{}, err
	}
	for _, kv := range open {
		add(kv[0], kv[1])
	}
	d.Hash = h.Sum128().Bytes()
	sortOffsets(d.Offsets)
	return d, nil
}

// digestView returns a snapshot of the committed store with the open
// requests (open.go) as of the same commit: memory runs ahead of Pebble
// while an Apply's chunks wait for their commit, so it waits for a moment
// when they agree.
func (s *Store) digestView() (*pebble.Snapshot, [][2][]byte, error) {
	deadline := time.Now().Add(digestWait)
	for {
		s.mu.RLock()
		if !s.uncommitted {
			break
		}
		s.mu.RUnlock()
		if time.Now().After(deadline) {
			return nil, nil, errors.New("statestore: digest: the store did not commit its applied records within " + digestWait.String())
		}
		time.Sleep(time.Millisecond)
	}
	defer s.mu.RUnlock()
	open, err := s.st.openDigest()
	if err != nil {
		return nil, nil, err
	}
	return s.db.NewSnapshot(), open, nil
}

// digestWait bounds how long Digest waits for an Apply to commit.
const digestWait = 30 * time.Second
