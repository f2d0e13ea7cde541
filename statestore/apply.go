package statestore

import (
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
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
// Readers see the state after whole chunks of records (Options.ChunkRecords)
// and the offsets that go with it. If the commit fails, memory is ahead of
// the store and the Store refuses further work: the caller reopens it.
func (s *Store) Apply(recs []*kgo.Record) error {
	if s.broken != nil {
		return s.broken
	}
	start := time.Now()
	b := s.db.NewBatch()
	defer b.Close()
	touched := map[topicPartition]struct{}{}
	counts := make([]int64, len(events.AllTopics))
	for lo := 0; lo < len(recs); lo += s.opts.ChunkRecords {
		hi := min(lo+s.opts.ChunkRecords, len(recs))
		s.mu.Lock()
		st := s.st
		for _, r := range recs[lo:hi] {
			t, ok := s.opts.Names.Logical(r.Topic)
			tp := topicPartition{t, r.Partition}
			if ok {
				if next, seen := st.offsets[tp]; seen && r.Offset < next {
					continue
				}
			}
			env, err := events.Decode(s.opts.Names, r)
			s.met.decode.Observe(s.opts.Names, r.Topic, err)
			if err != nil {
				s.log.Warn("statestore: skipping a record that does not decode", "err", err)
			} else {
				st.applyEnvelope(b, env, r.Timestamp.UnixMilli())
				counts[topicIndex[t]]++
			}
			if ok {
				st.offsets[tp] = r.Offset + 1
				touched[tp] = struct{}{}
			}
		}
		st.sweep(b)
		st.sweepPredictions()
		s.sweepDecisions(b)
		st.sweepLocalDecisions()
		st.flushHealth(b)
		if st.viewDirty {
			st.rebuildView()
		}
		s.checkKvEvents(false)
		s.met.addStats(&st.stats)
		s.notifyApplied()
		s.mu.Unlock()
	}
	s.mu.RLock()
	for tp := range touched {
		_ = b.Set(offsetKey(tp.topic, tp.partition), i64Value(s.st.offsets[tp]), nil)
	}
	_ = b.Set(keyNow, i64Value(s.st.now), nil)
	_ = b.Set(keyReqNow, i64Value(s.st.reqNow), nil)
	offs := s.st.sortedOffsets()
	s.met.observeState(s.st)
	s.mu.RUnlock()

	if testHookBeforeCommit != nil {
		testHookBeforeCommit()
	}
	s.commitMu.Lock()
	if s.db == nil {
		s.commitMu.Unlock()
		return fmt.Errorf("statestore: apply on a closed store")
	}
	err := b.Commit(pebble.NoSync)
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
	s.st.dec.committed()
	s.mu.Unlock()
	for i, n := range counts {
		if n > 0 {
			s.met.applied.WithLabelValues(string(events.AllTopics[i])).Add(float64(n))
		}
	}
	s.met.applySeconds.Observe(time.Since(start).Seconds())
	return nil
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

// Offsets returns the offset vector of the state readers currently see.
func (s *Store) Offsets() Offsets {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.st.sortedOffsets()
}

// CommittedOffsets returns the offset vector of the last committed batch:
// where a restart after a crash would resume, at the latest.
func (s *Store) CommittedOffsets() Offsets {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return slices.Clone(s.committed)
}
