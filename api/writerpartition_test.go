package api

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// With WriterPartitioner, every load delta a writer appends lands in its
// own partition of load-deltas, whatever its worker key, and its snapshots
// in its partition of load-shares, both in its cell, while records of
// other topics keep Kafka's default key partition (events.KeyPartition),
// so decisions and outcomes stay in their worker's partition.
func TestWriterPartitionerPlacesOwnDeltas(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		// router-7's key partitions are odd (9 of load-deltas' 16, 1 of
		// load-shares' 4): in cell 0 of 2 its own partitions are others.
		for _, cell := range []events.Cell{{}, {Index: 0, Count: 2}} {
			t.Run(cell.String(), func(t *testing.T) { checkWriterPartitioner(t, brokers, "router-7", cell) })
		}
	})
}

func checkWriterPartitioner(t *testing.T, brokers []string, writer string, cell events.Cell) {
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	names := events.Names{Prefix: prefix}
	cl := kafkatest.Client(t, brokers, append(GroupLogClientOpts(), kgo.RecordPartitioner(WriterPartitioner(names, writer, cell)))...)
	l := NewGroupLog(cl, names, 64<<20, prometheus.NewRegistry())
	deltas, outcomes, shares := names.Physical(events.TopicLoadDeltas), names.Physical(events.TopicOutcomes), names.Physical(events.TopicLoadShares)
	parts := partitionCounts(t, brokers, deltas, outcomes, shares)
	own := events.WriterPartition(writer, parts[deltas], cell)
	if !cell.OwnsPartition(own) {
		t.Fatalf("cell %s: the writer's partition %d is another cell's", cell, own)
	}
	ownShares := events.WriterPartition(writer, parts[shares], cell)
	pos, err := l.Append(context.Background(), &kgo.Record{Topic: shares, Key: []byte(writer), Value: []byte("s")})
	if err != nil {
		t.Fatal(err)
	}
	if pos[0].Partition != ownShares || !cell.OwnsPartition(ownShares) {
		t.Fatalf("cell %s: a snapshot landed in partition %d of load-shares; want the writer's %d, in its cell", cell, pos[0].Partition, ownShares)
	}
	// Workers whose keys spread over several partitions, so that a
	// partitioner hashing the key could not place them all in own by
	// chance.
	keyParts := map[int32]bool{}
	var workers []string
	for i := 0; len(keyParts) < 4; i++ {
		w := fmt.Sprintf("decode-%d", i)
		workers = append(workers, w)
		keyParts[events.KeyPartition(events.WorkerKey(w), parts[deltas])] = true
	}
	for i, w := range workers {
		d := &pb.LoadDelta{WriterId: writer, Lifecycle: []*pb.LifecycleDelta{{RequestId: fmt.Sprintf("r-%d", i),
			Kind: pb.OutcomeEvent_KIND_COMPLETED, EventTimeUnixNano: 1, DecodeWorker: &pb.WorkerRef{WorkerId: w}}}}
		dr, err := events.NewRecord(names, events.WorkerKey(w), d)
		if err != nil {
			t.Fatal(err)
		}
		or := &kgo.Record{Topic: outcomes, Key: events.WorkerKey(w), Value: []byte(w)}
		pos, err := l.Append(context.Background(), dr, or)
		if err != nil {
			t.Fatal(err)
		}
		if pos[0].Partition != own {
			t.Fatalf("the delta of %s was reported at partition %d; want the writer's %d", w, pos[0].Partition, own)
		}
	}
	for _, r := range kafkatest.ReadAll(t, brokers, deltas) {
		if r.Partition != own {
			t.Fatalf("a delta keyed %q landed in partition %d; want the writer's %d", r.Key, r.Partition, own)
		}
	}
	got := kafkatest.ReadAll(t, brokers, outcomes)
	if len(got) != len(workers) {
		t.Fatalf("%d outcomes; want %d", len(got), len(workers))
	}
	for _, r := range got {
		if want := events.KeyPartition(r.Key, parts[outcomes]); r.Partition != want {
			t.Fatalf("an outcome keyed %q landed in partition %d; want its key's %d", r.Key, r.Partition, want)
		}
	}
}

// partitionCounts returns the partition count of each topic.
func partitionCounts(t *testing.T, brokers []string, topics ...string) map[string]int32 {
	t.Helper()
	td, err := kadm.NewClient(kafkatest.Client(t, brokers)).ListTopics(context.Background(), topics...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, tp := range topics {
		d, ok := td[tp]
		if !ok || d.Err != nil || len(d.Partitions) < 2 {
			t.Fatalf("topic %s: %+v", tp, d)
		}
		out[tp] = int32(len(d.Partitions))
	}
	return out
}
