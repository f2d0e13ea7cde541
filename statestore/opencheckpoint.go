package statestore

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/pdrouter/pdrouter/events"
)

// Checkpoints of the open requests (open.go).
//
// Why not a key per request, as the facts have: most requests end within
// seconds, and a key written at the decision and deleted at the end costs
// every replica a memtable insert, a flush and compactions per decision of
// the group, which is what made a peer's apply grow with its store
// (docs/scaling.md). A checkpoint, every openCheckpointEvery of the
// store's clock, resumes from the family's position openReplayWindow back
// (a mark) and writes only the requests opened before that mark and still
// held: a request that ends within the window never reaches Pebble.
//
// Invariants, kept here and in Apply:
//
//   - A checkpoint is written in an Apply batch. It holds a mark's offsets
//     and clocks (ckptNext ≤ the store's own offsets of load-deltas) and
//     every request held that was opened from a record before the mark,
//     as it is now. After a restart (or a crash, which loses the batches
//     since the last flush, checkpoint and offsets alike), the family
//     resumes from ckptNext: the store reports min(offset, next) for each
//     load-deltas partition (Offsets), so the materializer reads the
//     records since the mark again, and Apply applies them to the open
//     requests and the latency model (state.replaying).
//   - Reading them again reaches the state before the restart: the
//     requests opened since the mark are opened again by the same records
//     in the same partition order and clocks (dropped ones dropped again);
//     a request restored from the checkpoint is as it was at the
//     checkpoint, and its lifecycle entries read again change nothing (each
//     keeps the latest time of its kind) and cannot drop it (it was held at
//     a later clock).
//   - The latency model is checkpointed whole, as it is at the checkpoint,
//     not as of the mark: every entry changed since the last checkpoint.
//     Its facts are a set in which a fact learnt again changes nothing (a
//     decision seen twice is a duplicate; of two outcomes of one kind the
//     later is kept; a fact whose bucket left the window is late), so the
//     records read again from the mark, some of which it holds already,
//     bring it to the model of a store that never stopped (latmodel's
//     order-independence; past MaxEntries its sample is a function of the
//     facts too, but for ids that are not ULIDs).
//   - The checkpoint's keys are not part of the digest: replicas write them
//     at different times. The digest hashes the family from memory instead
//     (openDigest), in key order, once the family stands at the store's
//     offsets, so replicas at equal offsets agree whenever their
//     checkpoints ran.
//   - Close and a snapshot write a checkpoint first, so a store closed
//     cleanly, or a replica started from a snapshot, has nothing to read
//     again.

// openCheckpointEvery is how often, in the store's clock (reqNow), the
// open requests are checkpointed: what a restart reads again at most.
const openCheckpointEvery = int64(5 * time.Second)

// openReplayWindow is how far back, in the store's clock, a checkpoint
// resumes from: a request that ends within it (nearly all) never reaches
// Pebble, and a restart reads at most about this much of load-deltas again.
const openReplayWindow = int64(time.Minute)

// famOpen holds the open requests' checkpoint: 'e' + entry id → encodeOpen,
// and 'c' + partition → the family's next offset and clock there.
const famOpen = 'r'

func openEntryKey(id string) []byte { return append([]byte{famOpen, 'e'}, id...) }

// openLatencyKey is a latency model entry's key in a checkpoint: the model
// is checkpointed whole, not from a mark (see the invariants above).
func openLatencyKey(id string) []byte { return append([]byte{famOpen, 'y'}, id...) }

// openMarkerKey marks a store of open requests. Every checkpoint writes it,
// the first one in the batch of the store's first load-deltas offsets, so a
// store with load-deltas offsets and no marker holds its requests as facts,
// even when it holds none at the moment (rebuild refuses it).
var openMarkerKey = []byte{famOpen, 'm'}

// openLayout is the marker's value: the layout of the family and of what
// it replaces. 1: the request index of the log's decisions is the open
// requests themselves (openindex.go), not keys 'd', 'q' and 'e', and the
// latency model is checkpointed with them ('r' 'y'), not written per
// batch ('y'). A store
// whose marker holds another value (an empty one: the index in Pebble) is
// refused with ErrWrongSource, and serve rebuilds it by replay.
var openLayout = []byte{1}

func openPartitionKey(partition int32) []byte {
	return binary.BigEndian.AppendUint32([]byte{famOpen, 'c'}, uint32(partition))
}

// encodeOpen is an open request's value: its decision's position on the
// load-deltas topic, then its facts as encodeEntry writes them.
//
//	uvarint partition | uvarint offset | encodeEntry
func encodeOpen(dst []byte, e *reqEntry) []byte {
	dst = binary.AppendUvarint(dst, uint64(e.partition))
	dst = binary.AppendUvarint(dst, uint64(e.offset))
	return encodeEntry(dst, e)
}

func decodeOpen(id string, v []byte) (*reqEntry, error) {
	r := reader{b: v}
	p, off := r.uvarint(), r.uvarint()
	if r.err != nil || p > math.MaxInt32 || off > math.MaxInt64 {
		return nil, errBadEntry
	}
	e, err := decodeEntry(id, r.b)
	if err != nil {
		return nil, err
	}
	if e.flags&fDecision == 0 {
		return nil, errBadEntry
	}
	e.partition, e.offset, e.stored = int32(p), int64(off), true
	return e, nil
}

// openPartitionValue: i64 next | u8 has clock | i64 clock.
func openPartitionValue(next, clock int64, hasClock bool) []byte {
	v := binary.LittleEndian.AppendUint64(make([]byte, 0, 17), uint64(next))
	if !hasClock {
		return append(v, 0)
	}
	v = append(v, 1)
	return binary.LittleEndian.AppendUint64(v, uint64(clock))
}

// restoreOpenKey loads one checkpoint key into st at Open; entries are
// collected for rebuild, which resolves and refreshes them with the rest.
func (st *state) restoreOpenKey(k, v []byte, entries *[]*reqEntry) error {
	f := st.act.open
	if f == nil {
		return fmt.Errorf("%w: it holds open requests (Options.PeerSums) and is opened without them", ErrWrongSource)
	}
	switch {
	case string(k) == string(openMarkerKey):
		if string(v) != string(openLayout) {
			return fmt.Errorf("%w: its open requests are of layout %x, not %x (the request index was in Pebble): rebuild it", ErrWrongSource, v, openLayout)
		}
		f.marked = true
	case len(k) > 2 && k[1] == 'y':
		if err := st.lat.Restore(string(k[2:]), v); err != nil {
			return fmt.Errorf("latency model entry %q: %w", k[2:], err)
		}
	case len(k) > 2 && k[1] == 'e':
		e, err := decodeOpen(string(k[2:]), v)
		if err != nil {
			return fmt.Errorf("open request %q: %w", k[2:], err)
		}
		*entries = append(*entries, e)
	case len(k) == 6 && k[1] == 'c' && (len(v) == 9 && v[8] == 0 || len(v) == 17 && v[8] == 1):
		p := int32(binary.BigEndian.Uint32(k[2:]))
		next := int64(binary.LittleEndian.Uint64(v))
		f.next[p], f.ckptNext[p] = next, next
		if v[8] == 1 {
			f.clock[p] = int64(binary.LittleEndian.Uint64(v[9:]))
		}
	default:
		return fmt.Errorf("open requests' key %q: %w", k, errBadKey)
	}
	return nil
}

// restoreOpen makes the checkpointed requests contribute, after rebuild
// has resolved their slots and read their chains back. A store that
// applied load deltas without the marker kept its requests as facts.
func (st *state) restoreOpen(entries []*reqEntry) error {
	if !st.act.open.marked {
		for tp := range st.offsets {
			if tp.topic == events.TopicLoadDeltas {
				return fmt.Errorf("%w: it applied load deltas with its requests kept as facts and is opened to hold them in memory (Options.PeerSums)", ErrWrongSource)
			}
		}
	}
	for _, e := range entries {
		st.pushGone(e)
		st.openRefresh(e)
	}
	f := st.act.open
	f.marks = []openMark{{at: math.MinInt64, next: maps.Clone(f.next), clock: maps.Clone(f.clock)}}
	return nil
}

// openReplays reports whether a record at offset of tp, below the store's
// offset, is read again for the open requests only: a load-deltas record
// at or past the family's next offset (after a restart).
func (st *state) openReplays(tp topicPartition, offset int64) bool {
	f := st.act.open
	return f != nil && tp.topic == events.TopicLoadDeltas && offset >= f.next[tp.partition]
}

// openAdvance notes that the family has read tp up to next.
func (st *state) openAdvance(tp topicPartition, next int64) {
	if f := st.act.open; f != nil && tp.topic == events.TopicLoadDeltas && next > f.next[tp.partition] {
		f.next[tp.partition] = next
	}
}

// writeOpenCheckpoint adds a checkpoint to b when one is due (or force).
// It resumes from base, the family's position at the oldest checkpoint of
// the last openReplayWindow (force: from now): the requests opened before
// base and still held are written (once, and again when they change), the
// requests dropped since the last checkpoint are deleted, and each
// partition gets base's next offset and clock. The requests opened since
// base are not written: a restart reads their records again. Called with
// the store's lock held, on the batch that commits the same offsets.
func (st *state) writeOpenCheckpoint(b *pebble.Batch, force bool) {
	f := st.act.open
	if f == nil || !force && f.lastCkpt != math.MinInt64 && st.reqNow < addSat(f.lastCkpt, openCheckpointEvery) {
		return
	}
	f.lastCkpt = st.reqNow
	f.marks = append(f.marks, openMark{at: st.reqNow, next: maps.Clone(f.next), clock: maps.Clone(f.clock)})
	// The newest mark at least openReplayWindow old is the base; older
	// ones are no longer needed.
	i := 0
	for i+1 < len(f.marks) && f.marks[i+1].at <= st.reqNow-openReplayWindow {
		i++
	}
	f.marks = f.marks[i:]
	base := f.marks[0]
	if force {
		base = f.marks[len(f.marks)-1]
	}
	// Deletions first: an id dropped and opened again since the last
	// checkpoint (a copy read later with a newer time) is written after.
	for _, id := range f.removed {
		_ = b.Delete(openEntryKey(id), nil)
	}
	f.removed = f.removed[:0]
	// The requests held that no checkpoint holds as they are now, and that
	// were opened before base: the front of each partition's unwritten
	// queue, then the changed ones. A dropped request is not written; one
	// not yet before base waits in its queue or list.
	write := func(e *reqEntry) {
		f.ebuf = encodeOpen(f.ebuf[:0], e)
		_ = b.Set(openEntryKey(e.id), f.ebuf, nil)
		e.stored, e.storedVer = true, e.ver
	}
	for p, q := range f.unwritten {
		n := 0
		for n < len(q) && q[n].offset < base.next[p] {
			if e := q[n]; !e.dropped && !e.stored {
				write(e)
			}
			n++
		}
		clear(q[:n])
		if n == len(q) {
			delete(f.unwritten, p)
		} else {
			f.unwritten[p] = q[n:]
		}
	}
	kept := f.changed[:0]
	for _, e := range f.changed {
		switch {
		case e.dropped || e.ver == e.storedVer:
		case e.offset < base.next[e.partition]:
			write(e)
		default:
			kept = append(kept, e)
		}
	}
	clear(f.changed[len(kept):])
	f.changed = kept
	for id := range f.latDirty {
		st.writeLatencyEntry(b, openLatencyKey(id), id)
	}
	clear(f.latDirty)
	_ = b.Set(openMarkerKey, openLayout, nil)
	clear(f.ckptNext)
	for p := range f.next {
		c, ok := base.clock[p]
		_ = b.Set(openPartitionKey(p), openPartitionValue(base.next[p], c, ok), nil)
		f.ckptNext[p] = base.next[p]
	}
	st.stats.openCheckpoints++
}

// familyOffsets replaces, in offs, each load-deltas offset by the family's
// next offset in next when that is lower: where the family stands.
func familyOffsets(offs Offsets, next map[int32]int64) Offsets {
	for i, o := range offs {
		if o.Topic == events.TopicLoadDeltas && next[o.Partition] < o.Next {
			offs[i].Next = next[o.Partition]
		}
	}
	return offs
}

// committedOffsets is sortedOffsets as a restart from the batch being
// committed would resume: the family from its last checkpoint.
func (st *state) committedOffsets() Offsets {
	offs := slices.DeleteFunc(st.sortedOffsets(), func(o PartitionOffset) bool { return topicNotStored(o.Topic) })
	if f := st.act.open; f != nil {
		offs = familyOffsets(offs, f.ckptNext)
	}
	return offs
}

// errOpenBehind: the digest of a store whose open requests stand behind its
// offsets (a restart's records since the checkpoint not read again yet).
var errOpenBehind = errors.New("statestore: the open requests stand behind the store's offsets: the records since their checkpoint have not been read again yet")

// openDigest returns the open requests' keys and values, in key order, as
// the digest hashes them: each entry, then each partition's clock.
func (st *state) openDigest() ([][2][]byte, error) {
	f := st.act.open
	if f == nil {
		return nil, nil
	}
	for tp, n := range st.offsets {
		if tp.topic == events.TopicLoadDeltas && f.next[tp.partition] != n {
			return nil, errOpenBehind
		}
	}
	var out [][2][]byte
	for id, e := range st.act.entries {
		out = append(out, [2][]byte{openEntryKey(id), encodeOpen(nil, e)})
	}
	for p, c := range f.clock {
		out = append(out, [2][]byte{openPartitionKey(p), binary.LittleEndian.AppendUint64(nil, uint64(c))})
	}
	// The latency model as a store of facts keeps it (latency.go): the
	// same keys and bytes, so both layouts hash it alike.
	for _, id := range st.lat.IDs() {
		v, _ := st.lat.AppendEntry(nil, id)
		out = append(out, [2][]byte{latencyEntryKey(id), v})
	}
	out = append(out, [2][]byte{keyLatencySums, st.lat.AppendSums(nil)})
	slices.SortFunc(out, func(a, b [2][]byte) int { return cmp.Compare(string(a[0]), string(b[0])) })
	return out, nil
}

// checkpointOpen writes a checkpoint of the open requests now, at the
// store's offsets, for Close and snapshots: the store then reopens with
// nothing to read again. It waits for an Apply in progress to commit.
func (s *Store) checkpointOpen() error {
	deadline := time.Now().Add(digestWait)
	for {
		s.mu.Lock()
		if s.st == nil || s.st.act.open == nil {
			s.mu.Unlock()
			return nil
		}
		if !s.uncommitted {
			break
		}
		s.mu.Unlock()
		if time.Now().After(deadline) {
			return errors.New("statestore: checkpoint of the open requests: the store did not commit its applied records within " + digestWait.String())
		}
		time.Sleep(time.Millisecond)
	}
	defer s.mu.Unlock()
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.db == nil {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	s.st.writeOpenCheckpoint(b, true)
	s.met.addStats(&s.st.stats)
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("statestore: checkpoint of the open requests: %w", err)
	}
	s.committed = s.st.committedOffsets()
	return nil
}
