package statestore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// producePlaced produces m keyed key to the given partition of its topic,
// as the writer of load shares places its load deltas (by writer, not by
// key).
func producePlaced(t *testing.T, cl *kgo.Client, prefix string, key string, partition int32, ms ...proto.Message) {
	t.Helper()
	var recs []*kgo.Record
	for _, m := range ms {
		r, err := events.NewRecord(events.Names{Prefix: prefix}, []byte(key), m)
		if err != nil {
			t.Fatal(err)
		}
		r.Partition = partition
		r.Timestamp = time.UnixMilli(produceClock.Add(1))
		recs = append(recs, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// writersOnPartitions returns two writer ids of distinct load-deltas
// partitions (of n) and a third on the first one's.
func writersOnPartitions(n int32) (a, b, z string) {
	a = "replica-a"
	pa := events.WriterPartition(a, n, events.Cell{})
	for i := 0; b == "" || z == ""; i++ {
		id := fmt.Sprintf("replica-%d", i)
		switch p := events.WriterPartition(id, n, events.Cell{}); {
		case p == pa && z == "":
			z = id
		case p != pa && b == "":
			b = id
		}
	}
	return a, b, z
}

// Against a broker (kfake, and the real one with PDR_TEST_BROKERS): a
// store of load shares reads of load-deltas its writer's partition only,
// skips another writer's deltas there, counts its peers' rows from
// load-shares, catches up (its lag ignores the partitions it does not
// read), and, reopened, reads load-shares from the start again to the same
// digest.
func TestSharesMaterializer(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		kafkatest.Migrate(t, brokers, prefix)
		cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		names := events.Names{Prefix: prefix}
		adm := kadm.NewClient(kafkatest.Client(t, brokers))
		parts := func(topic events.Topic) int32 {
			ends, err := adm.ListEndOffsets(context.Background(), names.Physical(topic))
			if err != nil {
				t.Fatal(err)
			}
			return int32(len(ends[names.Physical(topic)]))
		}
		nd, ns := parts(events.TopicLoadDeltas), parts(events.TopicLoadShares)
		a, b, z := writersOnPartitions(nd)
		pa, pb_ := events.WriterPartition(a, nd, events.Cell{}), events.WriterPartition(b, nd, events.Cell{})
		for _, id := range []string{"w1", "w2"} {
			producePlaced(t, cl, prefix, id, events.KeyPartition([]byte(id), parts(events.TopicWorkers)), registration(id, pb.Pool_POOL_DECODE, 16, 0))
		}
		// Event times from the clock that stamps the records: one more than
		// MaxEventSkew past its record's log time is refused (future_time),
		// and time.Now() runs ahead of produceClock by as long as this
		// package's tests have been running.
		now := time.UnixMilli(produceClock.Load()).UnixNano()
		producePlaced(t, cl, prefix, "w1", pa, ownDecision(a, "a1", "w1", "", now, 32))
		producePlaced(t, cl, prefix, "w1", pb_, ownDecision(b, "b1", "w1", "", now, 32))
		producePlaced(t, cl, prefix, "w1", pa, ownDecision(z, "z1", "w1", "", now, 32))
		producePlaced(t, cl, prefix, b, events.KeyPartition([]byte(b), ns), sharesOf(b, 1, now, shr("w1", 2, 1, 0, 1, 16)))
		producePlaced(t, cl, prefix, a, events.KeyPartition([]byte(a), ns), sharesOf(a, 1, now, shr("w1", 2, 1, 0, 1, 16)))

		dir := filepath.Join(t.TempDir(), "store")
		o := Options{Names: names, Source: SourceLoadShares, ReplicaID: a}
		r := openReplicaWith(t, dir, brokers, o)
		want := r.catchUp(t)
		for _, p := range r.s.Offsets() {
			if p.Topic == events.TopicLoadDeltas && p.Partition != pa {
				t.Fatalf("read load-deltas partition %d, the writer's is %d: %s", p.Partition, pa, r.s.Offsets())
			}
		}
		if next, _ := r.s.Offsets().Get(events.TopicLoadDeltas, pa); next != 2 {
			t.Fatalf("own partition at %d, want 2", next)
		}
		x := &harness{t: t, s: r.s}
		// Its own decision and b's row; not b's delta, not z's, not its own row.
		x.wantActive("w1", load(4, 2, 16, 2, 32))
		if n := testutil.ToFloat64(r.s.met.decode.Invalid.WithLabelValues(string(events.TopicLoadDeltas), reasonOtherWriter)); n != 1 {
			t.Fatalf("other_writer: %v", n)
		}
		// A wait for another writer's delta (a peer's answer passed on)
		// does not wait for a partition the store never reads; one for its
		// own partition does.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := r.s.WaitApplied(ctx, Offsets{{events.TopicLoadDeltas, pb_, 1}, {events.TopicLoadShares, events.KeyPartition([]byte(b), ns), 1}}); err != nil {
			t.Fatalf("waiting for another writer's delta: %v", err)
		}
		if err := r.s.WaitApplied(ctx, Offsets{{events.TopicLoadDeltas, pa, 3}}); err == nil {
			t.Fatal("a wait for its own partition's next record returned")
		}
		r.close()

		r = openReplicaWith(t, dir, brokers, Options{Names: names, Source: SourceLoadShares, ReplicaID: a, Registerer: prometheus.NewRegistry()})
		if got := r.catchUp(t); got.Hash != want.Hash || got.Private != want.Private {
			t.Fatalf("reopened: digest %x/%x, want %x/%x", got.Hash, got.Private, want.Hash, want.Private)
		}
		x = &harness{t: t, s: r.s}
		x.wantActive("w1", load(4, 2, 16, 2, 32))
	})
}

// TestSharesMaterializerInCell: a store of load shares in cell 0 of 2
// reads its own deltas and its cell's writers' snapshots, both on the
// cell's partitions (events.WriterPartition of the cell), for a writer and
// a worker whose ids hash to the other cell's partitions of the whole log.
func TestSharesMaterializerInCell(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		kafkatest.Migrate(t, brokers, prefix)
		cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		names := events.Names{Prefix: prefix}
		cell := events.Cell{Index: 0, Count: 2}
		const nd, ns, nw = 16, 4, 4 // the declared partitions of load-deltas, load-shares, workers
		// An id of the other cell's partitions on the whole log, of each kind.
		odd := func(kind string, n int32) string {
			for i := 0; ; i++ {
				if id := fmt.Sprintf("%s-%d", kind, i); !cell.OwnsPartition(events.KeyPartition([]byte(id), n)) {
					return id
				}
			}
		}
		a, b := odd("replica", nd), odd("peer", ns)
		// The worker is the cell's: its registration's partition is.
		w := "w0"
		for i := 0; !cell.OwnsKey(events.WorkerKey(w)); i++ {
			w = fmt.Sprintf("w%d", i)
		}
		producePlaced(t, cl, prefix, w, events.KeyPartition([]byte(w), nw), registration(w, pb.Pool_POOL_DECODE, 16, 0))
		// Event times from the clock that stamps the records: one more than
		// MaxEventSkew past its record's log time is refused (future_time),
		// and time.Now() runs ahead of produceClock by as long as this
		// package's tests have been running.
		now := time.UnixMilli(produceClock.Load()).UnixNano()
		pa := events.WriterPartition(a, nd, cell)
		producePlaced(t, cl, prefix, w, pa, ownDecision(a, "a1", w, "", now, 32))
		producePlaced(t, cl, prefix, b, events.WriterPartition(b, ns, cell), sharesOf(b, 1, now, shr(w, 2, 1, 0, 1, 16)))

		r := openReplicaWith(t, filepath.Join(t.TempDir(), "store"), brokers,
			Options{Names: names, Source: SourceLoadShares, ReplicaID: a, Cell: cell})
		r.catchUp(t)
		if next, _ := r.s.Offsets().Get(events.TopicLoadDeltas, pa); next != 1 {
			t.Fatalf("own partition %d at %d, want 1: %s", pa, next, r.s.Offsets())
		}
		// Its own decision and b's row.
		(&harness{t: t, s: r.s}).wantActive(w, load(4, 2, 16, 2, 32))
	})
}
