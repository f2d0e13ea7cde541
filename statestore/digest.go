package statestore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/zeebo/xxh3"

	"github.com/pdrouter/pdrouter/events"
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
//
// With SourceLoadShares a replica's own requests are its own: its requests
// (facts or open requests), the decisions and request index it learned
// from them, the latency model it learns from its own outcomes, the clocks
// they move, its load-deltas offsets and its writer id. Two replicas at
// equal offsets of the shared topics (kv-events, load, workers,
// load-shares) hold equal shared state whatever their own requests, so
// Hash covers the shared state only: the rest of Pebble as for any source,
// the load-shares offsets and the rows that count (sharerows.go), both
// from memory, since they are never stored. Private hashes the replica's
// own part, from the same pass: equal for two stores of one writer at
// equal offsets (a restart), zero for the other sources.
type Digest struct {
	Hash    [16]byte
	Private [16]byte
	Keys    int64
	Offsets Offsets
}

func (d Digest) String() string { return hex.EncodeToString(d.Hash[:]) }

// Digest computes the digest of the committed state. It reads the whole
// store (about a second per million keys); it is for tools, tests and
// GET /v1/state, not for the hot path.
func (s *Store) Digest() (Digest, error) {
	snap, mem, err := s.digestView()
	if err != nil {
		return Digest{}, err
	}
	defer snap.Close()
	it, err := snap.NewIter(nil)
	if err != nil {
		return Digest{}, err
	}
	defer it.Close()
	shares := s.opts.Source == SourceLoadShares
	h, priv := xxh3.New(), xxh3.New()
	var d Digest
	var n [binary.MaxVarintLen64]byte
	add := func(h *xxh3.Hasher, k, v []byte) {
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
		var t events.Topic
		if len(k) > 0 && k[0] == famOffset {
			var p int32
			var err error
			if t, p, err = parseOffsetKey(k[1:]); err == nil && len(v) == 8 {
				d.Offsets = append(d.Offsets, PartitionOffset{t, p, int64(binary.LittleEndian.Uint64(v))})
			}
		}
		if shares && privateKey(k, t) {
			add(priv, k, v)
		} else {
			add(h, k, v)
		}
	}
	if err := it.Error(); err != nil {
		return Digest{}, err
	}
	for _, kv := range mem.open {
		if shares {
			add(priv, kv[0], kv[1])
		} else {
			add(h, kv[0], kv[1])
		}
	}
	// Never stored: the load-shares offsets, then the rows, hashed after
	// Pebble's keys in this order on every replica.
	for _, o := range mem.shareOffsets {
		d.Offsets = append(d.Offsets, o)
		add(h, offsetKey(o.Topic, o.Partition), i64Value(o.Next))
	}
	for _, kv := range mem.rows {
		add(h, kv[0], kv[1])
	}
	d.Hash = h.Sum128().Bytes()
	if shares {
		d.Private = priv.Sum128().Bytes()
	}
	sortOffsets(d.Offsets)
	return d, nil
}

// privateKey reports whether a stored key (an offset of topic t, if an
// offset) belongs to a store of SourceLoadShares's own part: what it
// learned from its own requests.
func privateKey(k []byte, t events.Topic) bool {
	if len(k) == 0 {
		return false
	}
	switch k[0] {
	case famActive, famDecision, famRequest, famExpiry, famLatency:
		return true
	case famOffset:
		return t == events.TopicLoadDeltas
	case famMeta:
		// The clocks move with the own requests; the writer id is the
		// replica's.
		return bytes.Equal(k, keyNow) || bytes.Equal(k, keyReqNow) || bytes.Equal(k, keySharesWriter)
	}
	return false
}

// digestMemory is what the digest hashes from memory.
type digestMemory struct {
	open         [][2][]byte // the open requests (opencheckpoint.go)
	shareOffsets Offsets     // load-shares offsets, sorted
	rows         [][2][]byte // the counting rows (sharerows.go)
}

// digestView returns a snapshot of the committed store with the open
// requests (open.go) as of the same commit: memory runs ahead of Pebble
// while an Apply's chunks wait for their commit, so it waits for a moment
// when they agree.
func (s *Store) digestView() (*pebble.Snapshot, digestMemory, error) {
	deadline := time.Now().Add(digestWait)
	for {
		s.mu.RLock()
		if !s.uncommitted {
			break
		}
		s.mu.RUnlock()
		if time.Now().After(deadline) {
			return nil, digestMemory{}, errors.New("statestore: digest: the store did not commit its applied records within " + digestWait.String())
		}
		time.Sleep(time.Millisecond)
	}
	defer s.mu.RUnlock()
	open, err := s.st.openDigest()
	if err != nil {
		return nil, digestMemory{}, err
	}
	mem := digestMemory{open: open, rows: s.st.shares.sharesDigest()}
	for _, o := range s.st.sortedOffsets() {
		if topicNotStored(o.Topic) {
			mem.shareOffsets = append(mem.shareOffsets, o)
		}
	}
	return s.db.NewSnapshot(), mem, nil
}

// digestWait bounds how long Digest waits for an Apply to commit.
const digestWait = 30 * time.Second
