package statestore

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// Against the real broker: cells split the log by key. Two cells of two
// together apply exactly what one whole-log replica applies, each holds
// whole workers (the ones whose key hashes into it), two replicas of a
// cell agree byte for byte, and a cell's state is the state of its
// partitions: a store that applies only those records, the way explain
// rebuilds one at a watermark, has the same digest.
func TestRealKafkaCellsPartitionTheLog(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	const n = 3000
	produce(t, brokers, prefix, newGenerator(41, 16).events(n))

	dir := t.TempDir()
	whole := openCellReplica(t, filepath.Join(dir, "whole"), brokers, prefix, events.Cell{})
	var cells [2]*replica
	for i := range cells {
		cells[i] = openCellReplica(t, filepath.Join(dir, "cell", string(rune('0'+i))), brokers, prefix, events.Cell{Index: int32(i), Count: 2})
	}
	twin := openCellReplica(t, filepath.Join(dir, "twin"), brokers, prefix, events.Cell{Index: 1, Count: 2})

	dw := whole.catchUp(t)
	if got := sumOffsets(dw.Offsets); got != n {
		t.Fatalf("the whole log: %d records applied, want %d", got, n)
	}
	workersOf := func(r *replica) (ids []string) {
		r.s.Read(func(v View) {
			for _, w := range v.Workers() {
				id, _, _ := events.ParseWorkerRank(string(w.ID))
				ids = append(ids, id)
			}
		})
		slices.Sort(ids)
		return slices.Compact(ids)
	}
	all := workersOf(whole)
	var union []string
	total := int64(0)
	for i, r := range cells {
		d := r.catchUp(t)
		total += sumOffsets(d.Offsets)
		for _, o := range d.Offsets {
			if o.Partition%2 != int32(i) {
				t.Errorf("cell %d/2 applied %s/%d", i, o.Topic, o.Partition)
			}
		}
		ids := workersOf(r)
		if len(ids) == 0 {
			t.Fatalf("cell %d/2 holds no worker", i)
		}
		for _, id := range ids {
			if c := events.CellOfWorker(id, 2); c.Index != int32(i) {
				t.Errorf("cell %d/2 holds worker %s of cell %s", i, id, c)
			}
		}
		union = append(union, ids...)

		// The cell's state is the state of its partitions.
		ref, err := Open(filepath.Join(dir, "ref", string(rune('0'+i))), Options{Names: events.Names{Prefix: prefix}, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		for _, topic := range events.AllTopics {
			var recs []*kgo.Record
			for _, rec := range kafkatest.ReadAll(t, brokers, events.Names{Prefix: prefix}.Physical(topic)) {
				if rec.Partition%2 == int32(i) {
					recs = append(recs, rec)
				}
			}
			if err := ref.Apply(recs); err != nil {
				t.Fatal(err)
			}
		}
		dr, err := ref.Digest()
		_ = ref.Close()
		if err != nil {
			t.Fatal(err)
		}
		if dr.Hash != d.Hash || dr.Offsets.String() != d.Offsets.String() {
			t.Errorf("cell %d/2: %s at %s, but its partitions applied alone give %s at %s", i, d, d.Offsets, dr, dr.Offsets)
		}
	}
	if total != n {
		t.Errorf("the cells applied %d records together, want %d", total, n)
	}
	slices.Sort(union)
	if !slices.Equal(union, all) {
		t.Errorf("workers of the cells %v, of the whole log %v", union, all)
	}
	if a, b := cells[1].catchUp(t), twin.catchUp(t); a.Hash != b.Hash || a.Offsets.String() != b.Offsets.String() {
		t.Errorf("two replicas of cell 1/2 differ: %s at %s, %s at %s: %v", a, a.Offsets, b, b.Offsets, diffKeys(dumpKeys(t, cells[1].s), dumpKeys(t, twin.s)))
	}

	// A peer's snapshot bootstraps a replica of its own cell only.
	srv := httptest.NewServer(cells[0].s.SnapshotHandler(filepath.Join(dir, "tmp")))
	defer srv.Close()
	for _, c := range []events.Cell{{Index: 1, Count: 2}, {Index: 0, Count: 2}} {
		s, _, err := BootstrapFromPeer(context.Background(), srv.Client(), srv.URL, filepath.Join(dir, "boot-"+c.String()[:1]),
			Options{Names: events.Names{Prefix: prefix}, Registerer: prometheus.NewRegistry(), Cell: c})
		if c.Index == 1 {
			if !errors.Is(err, ErrWrongCell) {
				t.Fatalf("cell 0/2's snapshot bootstrapped a replica of cell 1/2: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		d, _ := s.Digest()
		_ = s.Close()
		if want := cells[0].catchUp(t); d.Hash != want.Hash {
			t.Fatalf("bootstrapped from cell 0/2's snapshot: %s, want %s", d, want)
		}
	}

	// A store opens only for the cell it holds.
	cell0, wholeDir := cells[0].s.Dir(), whole.s.Dir()
	cells[0].close()
	whole.close()
	for _, c := range []struct {
		dir  string
		cell events.Cell
	}{{cell0, events.Cell{Index: 1, Count: 2}}, {wholeDir, events.Cell{Index: 0, Count: 2}}, {cell0, events.Cell{Index: 0, Count: 4}}} {
		d := c.dir
		_, err := Open(d, Options{Names: events.Names{Prefix: prefix}, Registerer: prometheus.NewRegistry(), Cell: c.cell})
		if !errors.Is(err, ErrWrongCell) {
			t.Errorf("store %s opened as cell %s: %v, want ErrWrongCell", d, c.cell, err)
		}
	}
}

// A cell count that does not divide a topic's partitions would split a
// worker's records between cells: the materializer refuses to start.
func TestRealKafkaCellNeedsDivisiblePartitions(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.MigratePartitions(t, brokers, prefix, map[events.Topic]int32{events.TopicWorkers: 6})
	r := openCellReplica(t, filepath.Join(t.TempDir(), "s"), brokers, prefix, events.Cell{Index: 0, Count: 4})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := r.m.Run(ctx)
	if !errors.Is(err, events.ErrCellPartitions) {
		t.Fatalf("Run: %v, want ErrCellPartitions", err)
	}
	t.Log(err)
}

func openCellReplica(t testing.TB, dir string, brokers []string, prefix string, c events.Cell) *replica {
	t.Helper()
	return openReplicaWith(t, dir, brokers, Options{Names: events.Names{Prefix: prefix}, Cell: c})
}
