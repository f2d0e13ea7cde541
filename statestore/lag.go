package statestore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pdrouter/pdrouter/events"
)

// PartitionLag is how far the store is behind one partition.
type PartitionLag struct {
	Topic     events.Topic
	Partition int32
	// Applied is the store's next offset (the log start for a partition
	// it never read), End the partition's end offset.
	Applied, End int64
	Lag          int64
}

// Lag is the store's distance to the end of the log.
type Lag struct {
	Partitions []PartitionLag // sorted like Offsets
	Total      int64
	Max        int64
	// Unknown counts partitions whose end offset the brokers could not give
	// (no leader yet, a topic being created): their lag is not in Total.
	Unknown int
}

// Lag lists the end (and start) offsets of every partition of the store's
// cell (all of them, for the whole log) and subtracts
// what the store applied. A partition the store never read counts from its
// log start, so a partition emptied by retention is not lag. This is a
// round trip to the brokers: callers that poll (readiness probes) should
// rate-limit it.
func (m *Materializer) Lag(ctx context.Context) (Lag, error) {
	topics := m.physicalTopics()
	ends, err := m.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return Lag{}, fmt.Errorf("statestore: list end offsets: %w", err)
	}
	starts, err := m.adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return Lag{}, fmt.Errorf("statestore: list start offsets: %w", err)
	}
	stored := m.s.Offsets()
	var out Lag
	ends.Each(func(lo kadm.ListedOffset) {
		t, ok := m.names.Logical(lo.Topic)
		if !ok || !m.s.opts.Cell.OwnsPartition(lo.Partition) || !m.consumes(lo.Topic, lo.Partition, len(ends[lo.Topic])) {
			return
		}
		if lo.Err != nil {
			out.Unknown++
			return
		}
		applied, ok := stored.Get(t, lo.Partition)
		if s, found := starts.Lookup(lo.Topic, lo.Partition); found && s.Err == nil && (!ok || s.Offset > applied) {
			applied = s.Offset
		}
		pl := PartitionLag{Topic: t, Partition: lo.Partition, Applied: applied, End: lo.Offset, Lag: max(lo.Offset-applied, 0)}
		out.Partitions = append(out.Partitions, pl)
		out.Total += pl.Lag
		out.Max = max(out.Max, pl.Lag)
	})
	sortLag(out.Partitions)
	perTopic := map[events.Topic]int64{}
	for _, p := range out.Partitions {
		m.s.met.lag.WithLabelValues(string(p.Topic), strconv.Itoa(int(p.Partition))).Set(float64(p.Lag))
		perTopic[p.Topic] += p.Lag
	}
	for _, t := range events.AllTopics {
		m.s.met.topicLag.WithLabelValues(string(t)).Set(float64(perTopic[t]))
	}
	return out, nil
}

func sortLag(ps []PartitionLag) {
	o := make(Offsets, len(ps))
	idx := map[PartitionOffset]PartitionLag{}
	for i, p := range ps {
		o[i] = PartitionOffset{p.Topic, p.Partition, 0}
		idx[o[i]] = p
	}
	sortOffsets(o)
	for i, k := range o {
		ps[i] = idx[k]
	}
}

// Ready reports whether every partition's lag is at most bound records:
// the readiness gate of /readyz (invariant 4).
func (m *Materializer) Ready(ctx context.Context, bound int64) (bool, Lag, error) {
	lag, err := m.Lag(ctx)
	if err != nil {
		return false, lag, err
	}
	return lag.Max <= bound, lag, nil
}
