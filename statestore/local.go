package statestore

import (
	"bytes"
	"fmt"
	"slices"
	"sync"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// RecordLocalDecision counts a decision this replica just made, at once,
// makes it visible to Decision and DecisionForRequest, and in approximate
// mode adds its predicted cache entries (approx.go). d is retained and
// must not be modified afterwards.
//
// It counts the decision at once, before it comes back from the
// decisions topic (conditional-disagg.md: "a
// replica counts its own decision at once and ignores it when the decision
// comes back from the log, keyed by decision id"). It changes only memory,
// never Pebble or the digest: the state stays a function of the log, and
// the pending decision is dropped when the log copy is applied (which then
// counts it) or when it expires by event time without coming back.
func (s *Store) RecordLocalDecision(d *pb.DecisionRecord) error {
	defer s.UnexpectLocalDecision(d.GetDecisionId())
	if err := events.Validate(d); err != nil {
		return fmt.Errorf("statestore: local decision: %w", err)
	}
	// Whether the log copy was applied already: pending (checked under the
	// lock) or committed to Pebble. Pebble is read before the lock, and read
	// again under it only if a commit happened in between (the decision
	// may have moved from pending to Pebble unseen).
	id := d.GetDecisionId()
	gen := s.commits.Load()
	stored := s.decisionStored(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	applied := stored || s.decisionPending(id) || (gen != s.commits.Load() && s.decisionStored(id))
	s.st.recordLocal(d)
	if !applied {
		s.st.recordLocalDecision(d, nil)
	}
	if s.st.viewDirty {
		s.st.rebuildView()
	}
	return nil
}

// RecordLocalDecisionAt is RecordLocalDecision for a decision whose log
// copy the caller wrote at offset of partition of the decisions topic (the
// position its append returned; it must be that record's real position).
// The store then knows from its offsets whether it applied that copy
// already, without reading Pebble: when it has, the log copy counts and
// serves, and there is nothing to record.
//
// value, when not nil, is the record value that was appended (it is
// retained and must not be modified). When the log copy arrives with
// exactly these bytes, Apply uses d instead of decoding and re-encoding
// it: the same bytes are the same record.
func (s *Store) RecordLocalDecisionAt(d *pb.DecisionRecord, value []byte, partition int32, offset int64) error {
	return s.RecordLocalDecisionWithDelta(d, value, partition, offset, -1, -1)
}

// RecordLocalDecisionWithDelta is RecordLocalDecisionAt for a decision
// whose load delta the caller also wrote, at deltaOffset of deltaPartition
// of the load-deltas topic (-1: none). A store of source load-deltas
// learns the decision from the delta: when it has applied the delta's
// position, it counts nothing more (the request may even have ended), and
// it keeps the decision's position for lookups (ownPositions).
func (s *Store) RecordLocalDecisionWithDelta(d *pb.DecisionRecord, value []byte, partition int32, offset int64, deltaPartition int32, deltaOffset int64) error {
	defer s.UnexpectLocalDecision(d.GetDecisionId())
	if err := events.Validate(d); err != nil {
		return fmt.Errorf("statestore: local decision: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	applied := topicPartition{events.TopicDecisions, partition}
	if s.opts.Source != SourceDecisions {
		s.own.add(d.GetDecisionId(), partition, offset, s.opts.MaxLocalDecisions)
		// Without the delta's position the store cannot tell whether it
		// applied the decision: it records it, as RecordLocalDecision does.
		applied, offset = topicPartition{events.TopicLoadDeltas, deltaPartition}, deltaOffset
	}
	if next, ok := s.st.offsets[applied]; ok && offset >= 0 && next > offset {
		return nil // applied: counted (or already absent) and served from the log copy
	}
	s.st.recordLocal(d)
	s.st.recordLocalDecision(d, value)
	if s.st.viewDirty {
		s.st.rebuildView()
	}
	return nil
}

// ExpectLocalDecision announces a decision this replica is about to append
// with value as its record value, before the append. The broker
// acknowledges an append to the API and serves it to the materializer at
// the same moment, so the log copy is often applied before the API calls
// RecordLocalDecisionAt; announced, it is then recognized by its bytes
// (apply.go prepareAll) instead of being decoded and re-encoded. The
// announcement ends when the decision is recorded (RecordLocalDecision or
// RecordLocalDecisionAt, even one that fails), or at UnexpectLocalDecision
// when the append fails. d and value are retained until then and must not
// be modified.
func (s *Store) ExpectLocalDecision(d *pb.DecisionRecord, value []byte) {
	s.expecting.mu.Lock()
	s.expecting.m[d.GetDecisionId()] = expectedDecision{d: d, value: value}
	s.expecting.mu.Unlock()
}

// UnexpectLocalDecision ends ExpectLocalDecision.
func (s *Store) UnexpectLocalDecision(id string) {
	s.expecting.mu.Lock()
	delete(s.expecting.m, id)
	s.expecting.mu.Unlock()
}

// expectedDecisions are the announced decisions, by decision id. Lock
// order: Store.mu, then mu.
type expectedDecisions struct {
	mu sync.Mutex
	m  map[string]expectedDecision
}

type expectedDecision struct {
	d     *pb.DecisionRecord
	value []byte
}

// ownRecord returns the local record whose appended bytes are value, if id is
// one of this replica's decisions (recorded or only announced).
func (s *Store) ownRecord(id string, value []byte) *pb.DecisionRecord {
	if v, ok := s.st.dec.localValue[id]; ok && bytes.Equal(v, value) {
		return s.st.dec.local[id]
	}
	s.expecting.mu.Lock()
	defer s.expecting.mu.Unlock()
	if e, ok := s.expecting.m[id]; ok && bytes.Equal(e.value, value) {
		return e.d
	}
	return nil
}

// ownPositions are the positions on the decisions topic of this replica's
// recent decisions, in a store of source load-deltas: the deltas it applies
// cannot name them (they are appended in the same produce request), and
// lookups of its own recent decisions then read the whole record at once
// instead of searching the topic for it. Memory only, at most
// MaxLocalDecisions ids, the oldest out first.
type ownPositions struct {
	mu  sync.Mutex
	pos map[string][2]int64
	q   []string
}

func (o *ownPositions) add(id string, partition int32, offset int64, limit int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pos == nil {
		o.pos = map[string][2]int64{}
	}
	if _, ok := o.pos[id]; ok {
		return
	}
	o.pos[id] = [2]int64{int64(partition), offset}
	o.q = append(o.q, id)
	for len(o.q) > limit {
		delete(o.pos, o.q[0])
		o.q = o.q[1:]
	}
	if cap(o.q) > 4*limit {
		o.q = slices.Clone(o.q)
	}
}

// fill gives sd its position when it is one of this replica's decisions
// learnt from a delta (no position) and the position is still known.
func (o *ownPositions) fill(sd *StoredDecision) {
	if sd.Complete || sd.Partition >= 0 || sd.Record == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if p, ok := o.pos[sd.Record.GetDecisionId()]; ok {
		sd.Partition, sd.Offset = int32(p[0]), p[1]
	}
}
