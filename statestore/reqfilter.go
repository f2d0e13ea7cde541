package statestore

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// requestFilter answers "may the request index ('q' keys) hold request id
// R, and may it hold more than one key of R?" in memory, so that the
// idempotency lookup of a request id never seen (nearly every POST
// /v1/route) skips opening a Pebble iterator and seeking every level
// (~10 µs of CPU per lookup), and so does the lookup of a request whose
// one decision is in memory (a lifecycle event soon after its decision,
// decisions.go forRequest).
//
// The invariant, which makes a "no" safe: every request id with a 'q' key
// in Pebble, or in an Apply batch not committed yet, was added, unless its
// decision is absent at reqNow (retention: such keys are never served).
// It holds because
//
//   - Open fills the filter from every 'q' key in the store (loadRequests),
//     after migrations ran and before any lookup, whichever way the store
//     came to be (a restart, a snapshot, a rebuild: all go through Open);
//   - applyDecisionLog, the only writer of 'q' keys, adds the request id
//     before it sets the key, under mu, the lock forRequest reads the filter
//     under, with the pending decisions: a lookup that does not find the id
//     in the filter finds no pending decision and no committed key of it
//     either, as a lookup made at that instant would;
//   - a bucket is dropped only when every decision added to it is absent at
//     reqNow (its latest decided_at + retention ≤ reqNow), under mu, and
//     reqNow never goes back.
//
// The same holds of dups, the ids added while the filter already held
// them, for "at most one present key" (lookup).
//
// A "maybe" costs the Pebble seek as before: false positives (~1%, and
// the ids of decisions deleted, or of batches that failed to commit) are
// harmless. The filter is memory only, so the keyspace and the digest do
// not depend on it.
//
// Memory: ~10 bits per decision in retention (rate × DecisionRetention),
// bucketed by decided_at so that whole buckets leave with retention, and
// no more than maxFilterBytes (and 8 KiB a bucket): past it the buckets
// stop growing and only their false positives grow.
type requestFilter struct {
	seed  maphash.Seed
	width int64 // of a bucket, in ns of decided_at
	ret   int64
	// buckets by epoch (decided_at / width); few: present decisions span
	// one retention.
	buckets  map[int64]*filterBucket
	bytes    int // all buckets' blocks
	maxBytes int // maxFilterBytes; tests lower it
}

// filterBucket holds the request ids added with a decided_at in its epoch:
// all of them in ids, and in dups those that the filter may already have
// held when they were added (a request decided twice, or a false
// positive).
type filterBucket struct {
	ids, dups bloomSet
	maxT      int64 // the latest decided_at added
}

// bloomSet is a Bloom filter that grows: when its last layer is full a
// layer twice its size is added, and every layer is probed.
type bloomSet struct {
	layers []*bloomLayer
}

// bloomLayer is a split-block Bloom filter: a key sets one bit in each of
// the 8 words of one 256-bit block, so a probe touches one cache line.
type bloomLayer struct {
	blocks [][8]uint32
	n, cap int
}

const (
	bloomBitsPerKey = 10
	minLayerKeys    = 1 << 12
	maxFilterBytes  = 128 << 20
)

// bloomSalt are the odd multipliers of the split-block Bloom filter
// (Apache Parquet's).
var bloomSalt = [8]uint32{0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d, 0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31}

func newBloomLayer(keys int) *bloomLayer {
	return &bloomLayer{blocks: make([][8]uint32, layerBytes(keys)/32), cap: keys}
}

// layerBytes is the size of a layer for keys keys: a power of two of
// 32-byte blocks.
func layerBytes(keys int) int {
	return 32 << bits.Len(uint((keys*bloomBitsPerKey+255)/256-1))
}

func (l *bloomLayer) block(h uint64) *[8]uint32 {
	return &l.blocks[(h>>32)&uint64(len(l.blocks)-1)]
}

func (l *bloomLayer) add(h uint64) {
	b, x := l.block(h), uint32(h)
	for i, s := range bloomSalt {
		b[i] |= 1 << ((x * s) >> 27)
	}
	l.n++
}

func (l *bloomLayer) has(h uint64) bool {
	b, x := l.block(h), uint32(h)
	for i, s := range bloomSalt {
		if b[i]&(1<<((x*s)>>27)) == 0 {
			return false
		}
	}
	return true
}

// add adds h; keys sizes the first layer. A layer is only made within
// budget bytes, but for a first layer of minLayerKeys (8 KiB): the set
// needs one. It returns the bytes the set grew by.
func (bs *bloomSet) add(h uint64, keys, budget int) int {
	added := 0
	if len(bs.layers) == 0 {
		if layerBytes(keys) > budget {
			keys = minLayerKeys
		}
		bs.layers, added = []*bloomLayer{newBloomLayer(keys)}, layerBytes(keys)
	} else if last := bs.layers[len(bs.layers)-1]; last.n >= last.cap && layerBytes(2*last.cap) <= budget {
		bs.layers, added = append(bs.layers, newBloomLayer(2*last.cap)), layerBytes(2*last.cap)
	}
	bs.layers[len(bs.layers)-1].add(h)
	return added
}

func (bs *bloomSet) has(h uint64) bool {
	for _, l := range bs.layers {
		if l.has(h) {
			return true
		}
	}
	return false
}

func (bs *bloomSet) count() (n, bytes int) {
	for _, l := range bs.layers {
		n += l.n
		bytes += 32 * len(l.blocks)
	}
	return n, bytes
}

func newRequestFilter(retention int64) *requestFilter {
	return &requestFilter{seed: maphash.MakeSeed(), width: max(retention/4, 1), ret: retention, buckets: map[int64]*filterBucket{}, maxBytes: maxFilterBytes}
}

func (f *requestFilter) epoch(t int64) int64 {
	e := t / f.width
	if t%f.width < 0 {
		e--
	}
	return e
}

// add records that request id has a 'q' key of a decision made at t.
// sizeHint, when positive, is how many keys its bucket will get (Open).
func (f *requestFilter) add(id string, t int64, sizeHint int) {
	f.addHash(maphash.String(f.seed, id), t, sizeHint)
}

func (f *requestFilter) addHash(h uint64, t int64, sizeHint int) {
	dup := f.has(h, false)
	e := f.epoch(t)
	b := f.buckets[e]
	if b == nil {
		b = &filterBucket{maxT: t}
		f.buckets[e] = b
	}
	// A new bucket starts at the size of the largest: the rate of
	// decisions changes slowly.
	keys := max(sizeHint, minLayerKeys)
	if len(b.ids.layers) == 0 {
		for _, o := range f.buckets {
			n, _ := o.ids.count()
			keys = max(keys, n)
		}
	}
	f.bytes += b.ids.add(h, keys, f.maxBytes-f.bytes)
	if dup {
		f.bytes += b.dups.add(h, minLayerKeys, f.maxBytes-f.bytes)
	}
	b.maxT = max(b.maxT, t)
}

func (f *requestFilter) has(h uint64, dups bool) bool {
	for _, b := range f.buckets {
		set := &b.ids
		if dups {
			set = &b.dups
		}
		if set.has(h) {
			return true
		}
	}
	return false
}

// lookup tells what the request index may hold of request id: indexed is
// false only if it holds no present key of it, and single is true only if
// it holds at most one. Why single holds: of two present keys of one
// request, the one added second found the first in the filter (its bucket
// is kept while it is present) and went into dups, in the bucket of a
// present decision.
func (f *requestFilter) lookup(id string) (indexed, single bool) {
	if len(f.buckets) == 0 {
		return false, true
	}
	h := maphash.String(f.seed, id)
	if !f.has(h, false) {
		return false, true
	}
	return true, !f.has(h, true)
}

// sweep drops the buckets whose every decision is absent at now.
func (f *requestFilter) sweep(now int64) {
	for e, b := range f.buckets {
		if addSat(b.maxT, f.ret) <= now {
			_, n := b.ids.count()
			_, d := b.dups.count()
			f.bytes -= n + d
			delete(f.buckets, e)
		}
	}
}

// loadRequests fills st's filter from the request index in Pebble: a
// first pass counts each bucket's keys, so that each is one layer of the
// right size, the second adds them. A key or value this version did not
// write is never served by a lookup (firstStoredDecision), so it is left
// out. Both passes read every request key in retention: ~0.3 s per million
// on this project's 2-core machine with the keys in cache, so a day of
// retention at hundreds of decisions/s adds seconds to Open, which the log
// line at the end states.
func (s *Store) loadRequests(st *state) error {
	start := time.Now()
	f := st.dec.reqs
	counts := map[int64]int{}
	keys := 0
	each := func(fn func(id []byte, t int64)) error {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famRequest}, UpperBound: []byte{famRequest + 1}})
		if err != nil {
			return err
		}
		for it.First(); it.Valid(); it.Next() {
			k, v := it.Key()[1:], it.Value()
			n, w := binary.Uvarint(k)
			if w > 0 && uint64(len(k)-w) >= n && len(v) >= 8 {
				fn(k[w:w+int(n)], int64(binary.LittleEndian.Uint64(v)))
			}
		}
		return it.Close()
	}
	if err := each(func(_ []byte, t int64) { counts[f.epoch(t)]++; keys++ }); err != nil {
		return err
	}
	if err := each(func(id []byte, t int64) { f.addHash(maphash.Bytes(f.seed, id), t, counts[f.epoch(t)]) }); err != nil {
		return err
	}
	s.log.Info("statestore: request filter loaded", "request_keys", keys, "filter_bytes", f.bytes, "took", time.Since(start))
	return nil
}
