package ingest

import (
	"slices"
	"strconv"
	"testing"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// An ingest of one cell that follows registrations reads only its cell's
// workers' engines: another cell's ingest reads the rest, and no engine is
// read twice. Without a cell it reads them all.
func TestWatchWorkersReadsItsCellOnly(t *testing.T) {
	var ids []string
	for i := range 8 {
		ids = append(ids, "decode-"+strconv.Itoa(i))
	}
	for _, cell := range []events.Cell{{}, {Index: 0, Count: 2}, {Index: 1, Count: 2}} {
		ing, err := New(Config{Cell: cell}, Deps{Sink: &memSink{}, Log: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, id := range ids {
			// A topic on the bind endpoint: a source that dials nothing.
			r, err := events.NewRecord(ing.cfg.Names, events.WorkerKey(id), &pb.WorkerRegistration{WorkerId: id, Pool: pb.Pool_POOL_DECODE,
				Model: "m", BlockSize: 16, KvEventsTopic: "kv@" + id})
			if err != nil {
				t.Fatal(err)
			}
			ing.applyWorker(r)
			if cell.OwnsWorker(id) {
				want = append(want, id)
			}
		}
		var got []string
		for _, s := range ing.Sources() {
			got = append(got, s.WorkerID)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) || len(want) == 0 {
			t.Errorf("cell %s: sources %v, want %v", cell, got, want)
		}
	}
}
