package statestore

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// A decision id that appears on two partitions of the decisions topic (an
// append retried under another key, a record copied by a mirror or a
// hostile writer) must not make replicas disagree: replicas read the
// partitions interleaved differently, so whichever copy a replica happens
// to read first must not decide what it stores (design.md, invariant 1).

// duplicateOnPartition appends a copy of r, byte for byte, at the next
// offset of another partition of its topic.
func (h *harness) duplicateOnPartition(r *kgo.Record, partition int32) *kgo.Record {
	c := *r
	c.Partition = partition
	t, _ := events.Names{}.Logical(r.Topic)
	tp := topicPartition{t, partition}
	c.Offset = h.next[tp]
	h.next[tp]++
	return &c
}

// applyPartitionsInOrder applies log to a new store one whole partition at
// a time, the workers topic first, then before (if not nil), then the partitions of the other
// topics in the order given (each partition's own order kept, as Kafka
// keeps it), and returns the store.
func applyPartitionsInOrder(t *testing.T, log []*kgo.Record, order []int32, o Options, before func(*Store)) *Store {
	t.Helper()
	o.Registerer = prometheus.NewRegistry()
	s, err := Open(filepath.Join(t.TempDir(), "store"), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	isWorkers := func(r *kgo.Record) bool { tp, _ := events.Names{}.Logical(r.Topic); return tp == events.TopicWorkers }
	var regs []*kgo.Record
	for _, r := range log {
		if isWorkers(r) {
			regs = append(regs, r)
		}
	}
	if err := s.Apply(regs); err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(s)
	}
	for _, p := range order {
		var batch []*kgo.Record
		for _, r := range log {
			if r.Partition == p && !isWorkers(r) {
				batch = append(batch, r)
			}
		}
		if err := s.Apply(batch); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// crossPartitionLog is a log of decisions and outcomes in which every
// third decision record also appears, byte for byte, on another partition
// of the decisions topic, before or after its first copy.
// own holds each decision and its first copy, as the deciding replica
// would record it locally.
func crossPartitionLog(t *testing.T) (h *harness, log []*kgo.Record, dups int, own []ownCopy) {
	h = perfHarness(t)
	ds := perfDecisions(36, 11, 1e18)
	var recs []*kgo.Record
	for i, d := range ds {
		r := h.record(d.GetDecodeWorker().GetWorkerId(), d)
		own = append(own, ownCopy{d, r})
		recs = append(recs, r)
		if i%3 == 0 {
			recs = append(recs, h.duplicateOnPartition(r, (r.Partition+1+int32(i%5))%h.parts))
			dups++
		}
		if i%2 == 0 {
			recs = append(recs, h.record(d.GetDecodeWorker().GetWorkerId(), completedOutcome(d, i)))
		}
	}
	return h, append(slices.Clone(h.log), recs...), dups, own
}

type ownCopy struct {
	d *pb.DecisionRecord
	r *kgo.Record
}

// TestDuplicateDecisionAcrossPartitions: the same decision record on two
// partitions, read in opposite partition orders by two replicas (and in
// random interleavings by others), gives one keyspace and one digest.
func TestDuplicateDecisionAcrossPartitions(t *testing.T) {
	h, log, dups, own := crossPartitionLog(t)
	if dups == 0 {
		t.Fatal("no duplicate in the log: the test shows nothing")
	}
	var up, down []int32
	for p := range h.parts {
		up = append(up, p)
		down = append(down, h.parts-1-p)
	}
	a := applyPartitionsInOrder(t, log, up, h.opts, nil)
	b := applyPartitionsInOrder(t, log, down, h.opts, nil)
	da, db := storeDigest(t, a), storeDigest(t, b)
	for _, s := range [...]*Store{a, b} {
		if got := testutil.ToFloat64(s.met.copies); got != float64(dups) {
			t.Errorf("pdrouter_decision_copies_total %v, want %d", got, dups)
		}
	}
	if da.Offsets.String() != db.Offsets.String() {
		t.Fatalf("offsets differ: %s vs %s", da.Offsets, db.Offsets)
	}
	if da.Hash != db.Hash {
		d := diffKeys(dumpKeys(t, a), dumpKeys(t, b))
		t.Fatalf("partitions read in ascending and descending order give digests %s and %s; %d keys differ, first: %.120s", da, db, len(d), d[0])
	}
	// The replica that made the decisions counts them at once and reads
	// its own copies back (RecordLocalDecisionAt kept their bytes), in the
	// descending order too.
	c := applyPartitionsInOrder(t, log, down, h.opts, func(c *Store) {
		for _, oc := range own {
			if err := recordLocal(c, oc.d, oc.r); err != nil {
				t.Fatal(err)
			}
		}
	})
	if dc := storeDigest(t, c); dc.Hash != da.Hash {
		t.Fatalf("the deciding replica: digest %s, want %s", dc, da)
	}
	for seed := uint64(1); seed <= 3; seed++ {
		if got := replayDigest(t, log, rand.New(rand.NewPCG(seed, 4)), h.opts); got.Hash != da.Hash {
			t.Fatalf("interleaving %d: digest %s, want %s", seed, got, da)
		}
	}
	// The copy at the lowest position is the one a lookup names, on every
	// replica: the position is part of the stored decision, and whoever
	// reads the whole record back reads it there.
	for _, s := range [...]*Store{a, b, c} {
		for _, r := range log {
			if tp, _ := (events.Names{}).Logical(r.Topic); tp != events.TopicDecisions {
				continue
			}
			id, _ := s.ownDecisionCandidate(r)
			sd, ok := s.Decision(id)
			if !ok {
				t.Fatalf("decision %s not found", id)
			}
			if sd.Complete && s == c {
				continue // the deciding replica's whole record, served from memory
			}
			lp, lo := lowestPosition(log, r)
			if sd.Partition != lp || sd.Offset != lo {
				t.Fatalf("decision %s served at %d@%d, want its lowest position %d@%d", id, sd.Partition, sd.Offset, lp, lo)
			}
		}
	}
}

// lowestPosition is the lowest (partition, offset) of the records of log
// with r's value.
func lowestPosition(log []*kgo.Record, r *kgo.Record) (int32, int64) {
	p, o := r.Partition, r.Offset
	for _, c := range log {
		if c.Topic == r.Topic && string(c.Value) == string(r.Value) && (c.Partition < p || c.Partition == p && c.Offset < o) {
			p, o = c.Partition, c.Offset
		}
	}
	return p, o
}

func storeDigest(t *testing.T, s *Store) Digest {
	t.Helper()
	d, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
