package statestore

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/rejects"
)

// Apply applies a batch of records, in order, and commits every resulting
// change together with the batch's new offsets in ONE Pebble batch
// (invariant 2, exactly-once materialization): after a crash the store
// holds either all of the batch and its offsets, or none of it.
//
// Records at or below a partition's stored offset are skipped (a
// re-delivery), so Apply is safe to call with overlapping batches. A
// record that cannot be decoded is counted (pdrouter_records_invalid_total),
// logged and skipped, and its offset still advances: it will never decode.
//
// Readers see the state after whole chunks of records (Options.ChunkRecords,
// and at most chunkHold of work under the write lock) and the offsets that
// go with it. Records are decoded (and decision records re-encoded) before
// the lock is taken: under it, only the state changes. If the commit fails,
// memory is ahead of the store and the Store refuses further work: the
// caller reopens it.
func (s *Store) Apply(recs []*kgo.Record) error {
	if s.broken != nil {
		return s.broken
	}
	start := time.Now()
	// Sized for the batch's values: growing a batch copies it. A decision
	// record is tens of KB, but its table and chains stay on the log (and
	// in memory, chains.go): the batch gets its header (the watermark is
	// most of it) and small index and entry values.
	size := 0
	for _, r := range recs {
		if t, _ := s.opts.Names.Logical(r.Topic); t == events.TopicDecisions {
			size += min(len(r.Value), decisionBatchBytes)
		} else {
			size += 2*len(r.Value) + 64
		}
	}
	b := s.db.NewBatchWithSize(min(size, 256<<20))
	defer b.Close()
	rows := s.rowsOnly(recs)
	touched := map[topicPartition]struct{}{}
	counts := make([]int64, len(events.AllTopics))
	// prep[k] is recs[lo+k] prepared; a chunk cut short keeps the rest.
	prep := make([]preparedRecord, 0, min(len(recs), s.opts.ChunkRecords))
	pw := prefixWritesPool.Get().(*prefixWrites)
	defer func() { pw.reset(); prefixWritesPool.Put(pw) }()
	for lo := 0; lo < len(recs); {
		hi := min(lo+s.opts.ChunkRecords, len(recs))
		if n := lo + len(prep); n < hi {
			prep = s.prepareAll(prep, recs[n:hi])
		}
		s.mu.Lock()
		st := s.st
		st.pw = pw
		held := time.Now()
		for i, r := range recs[lo:hi] {
			if i > 0 && i%8 == 0 && time.Since(held) > chunkHold {
				// Readers wait while the lock is held: let them in, and
				// go on with the rest in the next chunk.
				hi = lo + i
				break
			}
			t, ok := s.opts.Names.Logical(r.Topic)
			tp := topicPartition{t, r.Partition}
			replay := false
			if ok {
				if next, seen := st.offsets[tp]; seen && r.Offset < next {
					if !st.openReplays(tp, r.Offset) {
						continue
					}
					// Applied before a restart, and read again for the
					// open requests only (opencheckpoint.go).
					replay = true
				}
				if !s.opts.Source.Applies(t) {
					// The other source's topic: not part of this state,
					// not even its offsets (checkSourceOffsets).
					prep[i] = preparedRecord{}
					continue
				}
			}
			s.uncommitted = true
			p := &prep[i]
			st.replaying = replay
			switch {
			case replay && p.err != nil:
			case replay:
				_ = st.applyEnvelope(b, p.env, r.Timestamp.UnixMilli())
				st.stats.openReplayed++
			case p.err != nil:
				s.met.decode.Observe(s.opts.Names, r.Topic, p.err)
				s.log.Warn("statestore: skipping a record that does not decode", "err", p.err)
			default:
				s.met.decode.Observe(s.opts.Names, r.Topic, p.err)
				if reason := st.applyEnvelope(b, p.env, r.Timestamp.UnixMilli()); reason != "" {
					s.skipped(r, t, reason)
				} else {
					counts[topicIndex[t]]++
				}
			}
			st.replaying = false
			*p = preparedRecord{}
			if ok {
				st.openAdvance(tp, r.Offset+1)
				if !replay {
					st.offsets[tp] = r.Offset + 1
					touched[tp] = struct{}{}
				}
			}
		}
		prep = prep[hi-lo:]
		lo = hi
		st.sweep(b)
		st.sweepPredictions()
		s.sweepDecisions(b)
		st.sweepLocalDecisions()
		st.flushHealth(b)
		st.flushLatency(b)
		st.freeQueued()
		if st.viewDirty {
			st.rebuildView()
		}
		if !rows {
			s.checkSlotFlags(false)
		}
		s.logHealth(st.stats.healthTransitions)
		s.logReplicaIDConflicts(st.stats.replicaIDConflicts)
		s.met.addStats(&st.stats)
		st.wm.Store(nil) // offsets moved
		st.pw = nil
		s.notifyApplied()
		s.mu.Unlock()
	}
	// Sorted outside the lock: readers need not wait for it.
	pw.flush(b)
	s.mu.Lock()
	for tp := range touched {
		if topicNotStored(tp.topic) {
			continue // read again from the start at every open (sharerows.go)
		}
		_ = b.Set(offsetKey(tp.topic, tp.partition), i64Value(s.st.offsets[tp]), nil)
	}
	if !rows {
		_ = b.Set(keyNow, i64Value(s.st.now), nil)
		_ = b.Set(keyReqNow, i64Value(s.st.reqNow), nil)
	}
	s.st.writeOpenCheckpoint(b, false)
	// Nothing stored changed for a batch of rows alone (rowsOnly): its
	// commit would write nothing and cost a pass over the offsets, the
	// gauges and the commit pipeline, per fetch of every peer.
	commit := !rows || !b.Empty()
	offs := s.committed
	if commit {
		offs = s.st.committedOffsets()
		s.met.observeState(s.st)
	} else {
		// The rows and the offsets of the batch are all it moved.
		s.met.observeRows(s.st)
		for tp := range touched {
			s.met.observeOffset(tp, s.st.offsets[tp])
		}
	}
	s.met.addStats(&s.st.stats)
	s.mu.Unlock()

	if testHookBeforeCommit != nil && commit {
		testHookBeforeCommit()
	}
	s.commitMu.Lock()
	if s.db == nil {
		s.commitMu.Unlock()
		return fmt.Errorf("statestore: apply on a closed store")
	}
	var err error
	if commit {
		err = b.Commit(pebble.NoSync)
	}
	if err == nil {
		s.committed = offs
	}
	s.commitMu.Unlock()
	if err != nil {
		s.broken = fmt.Errorf("statestore: commit failed, memory is ahead of the store; reopen it: %w", err)
		return s.broken
	}
	// Pebble serves the batch's decisions from now on.
	s.mu.Lock()
	s.st.dec.committed(s.cache)
	s.commits.Add(1)
	s.uncommitted = false
	s.mu.Unlock()
	for i, n := range counts {
		if n > 0 {
			s.met.applied.WithLabelValues(string(events.AllTopics[i])).Add(float64(n))
		}
	}
	s.met.applySeconds.Observe(time.Since(start).Seconds())
	return nil
}

// rowsOnly reports whether recs are all load-shares records of a store
// that keeps rows. They change the rows and nothing else: no stored offset
// (topicNotStored), no clock (applyEnvelope observes no time of theirs),
// and none of what the slot flags read (registrations, KV events, load
// samples, the clock), so Apply leaves the flags, the stored keys and the
// commit out.
func (s *Store) rowsOnly(recs []*kgo.Record) bool {
	if s.opts.Source != SourceLoadShares || len(recs) == 0 {
		return false
	}
	for _, r := range recs {
		if t, ok := s.opts.Names.Logical(r.Topic); !ok || t != events.TopicLoadShares {
			return false
		}
	}
	return true
}

// prefixWritesPool keeps the buffers of prefixWrites between Apply calls.
var prefixWritesPool = sync.Pool{New: func() any { return new(prefixWrites) }}

// decisionBatchBytes is what the batch is sized for per decision record:
// a header with the watermark of ~100 partitions, and its keys.
const decisionBatchBytes = 4 << 10

// skipped counts and logs a record that decoded but that the state's
// limits refuse (skip.go), with its position so it can be found again.
func (s *Store) skipped(r *kgo.Record, t events.Topic, reason string) {
	s.met.decode.Invalid.WithLabelValues(string(t), reason).Inc()
	if reason == reasonTooManyWorkers {
		s.met.rejected.Inc(rejects.Registration, reason)
	}
	s.log.Warn("statestore: skipping a record the state refuses", "reason", reason,
		"topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
}

// chunkHold bounds the work of one chunk under the write lock, so that a
// catch-up or a burst of large decision records never stalls the hot path
// for long. Where a chunk ends does not change the state (determinism tests
// apply in batches of any size), only when readers see it.
const chunkHold = time.Millisecond

// preparedRecord is a record decoded outside the write lock: the envelope
// or the decode error.
type preparedRecord struct {
	env *events.Envelope
	err error
}

// prepareAll appends the prepared recs to dst. It runs without the write
// lock; a record that turns out to be a re-delivery is prepared for
// nothing.
//
// This replica's own decisions come back from the log byte for byte as
// they were appended (RecordLocalDecisionAt, or ExpectLocalDecision before
// it, kept the bytes): such a record is not decoded, the local record is
// used.
func (s *Store) prepareAll(dst []preparedRecord, recs []*kgo.Record) []preparedRecord {
	var own []*pb.DecisionRecord // own[i]: the local record of recs[i], if any
	for i, r := range recs {
		id, ok := s.ownDecisionCandidate(r)
		if !ok {
			continue
		}
		if own == nil {
			own = make([]*pb.DecisionRecord, len(recs))
			s.mu.RLock()
		}
		own[i] = s.ownRecord(id, r.Value)
	}
	if own != nil {
		s.mu.RUnlock()
	}
	for i, r := range recs {
		if own != nil && own[i] != nil && events.CheckEventTime(own[i].GetDecidedAtUnixNano(), r.Timestamp) != nil {
			own[i] = nil // Decode gives the error every replica gives
		}
		if own != nil && own[i] != nil {
			t, _ := s.opts.Names.Logical(r.Topic)
			env := &events.Envelope{Topic: t, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Schema: decisionSchema, Message: own[i]}
			dst = append(dst, preparedRecord{env: env})
			continue
		}
		// Another replica's decision (or a record of another topic): the
		// apply rules read only a few parts of a decision's table.
		env, err := events.DecodeForApply(s.opts.Names, r, s.opts.Approximate)
		dst = append(dst, preparedRecord{env: env, err: err})
	}
	return dst
}

var decisionSchema = events.SchemaOf(events.TopicDecisions)

// ownDecisionCandidate returns the decision id of r when r is a decision
// record that events.Decode would read as this build's DecisionRecord
// schema, so that it may be one of this replica's own.
func (s *Store) ownDecisionCandidate(r *kgo.Record) (string, bool) {
	if t, ok := s.opts.Names.Logical(r.Topic); !ok || t != events.TopicDecisions || len(r.Value) > events.MaxValueBytes {
		return "", false
	}
	var schema []byte
	found := false
	for _, h := range r.Headers {
		if h.Key == events.HeaderSchema {
			schema, found = h.Value, true
		}
	}
	if !found || string(schema) != decisionSchema {
		return "", false
	}
	// decision_id is field 1; look for it among the top-level fields.
	b := r.Value
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", false
			}
			return string(v), true
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
	}
	return "", false
}

// testHookBeforeCommit, when set (tests only), runs after readers see a
// batch and before Pebble has it: the window decisions.go's pending map
// bridges.
var testHookBeforeCommit func()

var topicIndex = func() map[events.Topic]int {
	m := map[events.Topic]int{}
	for i, t := range events.AllTopics {
		m[t] = i
	}
	return m
}()

// PartitionOffset is the next offset to read in one partition.
type PartitionOffset struct {
	Topic     events.Topic
	Partition int32
	Next      int64
}

// Offsets is an offset vector, sorted by topic (events.AllTopics order) and
// partition, so equal vectors compare and print equal.
type Offsets []PartitionOffset

// Get returns the next offset of a partition, and false when the store
// has never applied a record of it.
func (o Offsets) Get(t events.Topic, partition int32) (int64, bool) {
	for _, p := range o {
		if p.Topic == t && p.Partition == partition {
			return p.Next, true
		}
	}
	return 0, false
}

func (o Offsets) String() string {
	s := ""
	for i, p := range o {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s/%d=%d", p.Topic, p.Partition, p.Next)
	}
	return s
}

func (st *state) sortedOffsets() Offsets {
	out := make(Offsets, 0, len(st.offsets))
	for tp, n := range st.offsets {
		out = append(out, PartitionOffset{tp.topic, tp.partition, n})
	}
	sortOffsets(out)
	return out
}

func sortOffsets(o Offsets) {
	slices.SortFunc(o, func(a, b PartitionOffset) int {
		if a.Topic != b.Topic {
			return topicIndex[a.Topic] - topicIndex[b.Topic]
		}
		return int(a.Partition) - int(b.Partition)
	})
}

// Offsets returns the offset vector of the state readers currently see:
// where it would resume. For load-deltas partitions of a store of open
// requests that is where the open requests stand, which after a restart is
// behind what the rest of the state applied until the records since their
// checkpoint are read again (opencheckpoint.go).
func (s *Store) Offsets() Offsets {
	s.mu.RLock()
	defer s.mu.RUnlock()
	offs := s.st.sortedOffsets()
	if f := s.st.act.open; f != nil {
		// The open requests resume from their checkpoint (opencheckpoint.go).
		offs = familyOffsets(offs, f.next)
	}
	return offs
}

// CommittedOffsets returns the offset vector of the last committed batch:
// where a restart after a crash would resume, at the latest.
func (s *Store) CommittedOffsets() Offsets {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return slices.Clone(s.committed)
}
