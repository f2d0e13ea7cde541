package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/migrations"
	"github.com/pdrouter/pdrouter/statestore"
)

// Two floor replicas of --load-deltas snapshots on one broker fetch what
// real peers fetch: every snapshot of the group and only their own load
// deltas, which each appends to its own partition. A group commit carries
// a snapshot of the workers touched since the last one (at most one a
// commit: an append that touches a worker while the commit before its own
// runs has its worker taken by that one), which decodes as a peer decodes
// it, and every touched worker is sent.
func TestFloorReplicaSnapshots(t *testing.T) {
	brokers := kafkatest.Fake(t)
	names := events.Names{Prefix: "floor-shares."}
	specs, err := migrations.Declarations(migrations.SingleNodeOptions(names.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	conn := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	if _, err := runMigrate(context.Background(), conn, specs, false); err != nil {
		t.Fatal(err)
	}
	deltas, shares := names.Physical(events.TopicLoadDeltas), names.Physical(events.TopicLoadShares)
	td, err := kadm.NewClient(kafkatest.Client(t, brokers)).ListTopics(context.Background(), deltas)
	if err != nil {
		t.Fatal(err)
	}
	n := int32(len(td[deltas].Partitions))
	// Two writers whose own partitions differ, so that a floor that read
	// the whole topic would fetch the other's deltas too.
	ids := []string{"floor-a"}
	for i := 0; len(ids) < 2; i++ {
		if id := fmt.Sprintf("floor-%d", i); events.WriterPartition(id, n, events.Cell{}) != events.WriterPartition(ids[0], n, events.Cell{}) {
			ids = append(ids, id)
		}
	}
	var reps []*scaleReplica
	for _, id := range ids {
		reps = append(reps, startFloorReplicaOn(t, floorConfig{names: names, connOpts: conn, maxBlocks: 128, decode: 4, prefill: 2,
			writeDeltas: true, source: statestore.SourceLoadShares, replicaID: id}))
	}
	for _, r := range reps {
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for _, path := range []string{"/v1/route", "/v1/requests/x/events"} {
					resp, err := http.Post(r.url+path, "application/json", strings.NewReader(`{"block_hashes":[1,2]}`))
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode/100 != 2 {
						t.Errorf("%s: %d", path, resp.StatusCode)
					}
				}
			})
		}
		wg.Wait()
	}
	if t.Failed() {
		return
	}
	if err := checkFloorFetched(context.Background(), reps); err != nil {
		t.Fatal(err)
	}
	// Every record of the group for all, and each its own deltas: no
	// more (the other writer's deltas), once the fetches caught up.
	var all float64
	counts := make([][]float64, len(reps))
	for i, r := range reps {
		v, err := r.metrics(context.Background(), floorAppendedMetric, floorFetchedMetric, floorOwnMetric,
			"pdrouter_eventlog_group_appends_count", "pdrouter_load_share_records_total{result=\"written\"}")
		if err != nil {
			t.Fatal(err)
		}
		counts[i] = v
		all += v[0]
		if v[2] == 0 || v[4] == 0 || v[4] > v[3] {
			t.Fatalf("%s: %v own deltas, %v group commits and %v snapshots; want deltas, and at most a snapshot per commit", ids[i], v[2], v[3], v[4])
		}
	}
	time.Sleep(200 * time.Millisecond) // a fetch that read beyond its share would show by now
	for i, r := range reps {
		if f, _ := r.metric(context.Background(), floorFetchedMetric); f != all+counts[i][2] {
			t.Fatalf("%s fetched %v records; want the group's %v and its own %v deltas", ids[i], f, all, counts[i][2])
		}
	}
	for _, rec := range kafkatest.ReadAll(t, brokers, deltas) {
		env, err := events.Decode(names, rec)
		if err != nil {
			t.Fatal(err)
		}
		w := env.Message.(*pb.LoadDelta).GetWriterId()
		if rec.Partition != events.WriterPartition(w, n, events.Cell{}) {
			t.Fatalf("a delta of %s in partition %d; want its writer's %d", w, rec.Partition, events.WriterPartition(w, n, events.Cell{}))
		}
	}
	seq, sent := map[string]uint64{}, map[string]map[string]bool{}
	for _, rec := range kafkatest.ReadAll(t, brokers, shares) {
		env, err := events.Decode(names, rec)
		if err != nil {
			t.Fatalf("a floor snapshot a peer refuses: %v", err)
		}
		s := env.Message.(*pb.LoadShares)
		if s.GetSeq() != seq[s.GetWriterId()]+1 || len(s.GetShares()) == 0 || len(s.GetShares()) > 4 {
			t.Fatalf("snapshot of %s: seq %d after %d, %d shares; want the next seq and 1 to 4 touched workers", s.GetWriterId(), s.GetSeq(), seq[s.GetWriterId()], len(s.GetShares()))
		}
		seq[s.GetWriterId()] = s.GetSeq()
		if sent[s.GetWriterId()] == nil {
			sent[s.GetWriterId()] = map[string]bool{}
		}
		for _, e := range s.GetShares() {
			sent[s.GetWriterId()][e.GetWorker().GetWorkerId()] = true
		}
	}
	for _, id := range ids {
		if len(sent[id]) != 4 {
			t.Fatalf("%s sent the shares of %v; want its 4 workers, every one its appends touched", id, sent[id])
		}
	}
}

// checkFloorFetched waits for a floor replica's own records too: fetching
// what the group appended for all is not enough while its own deltas are
// not fetched.
func TestCheckFloorFetchedCountsOwnRecords(t *testing.T) {
	replica := func(appended, fetched, own int) *scaleReplica {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "%s %d\n%s %d\n%s %d\n", floorAppendedMetric, appended, floorFetchedMetric, fetched, floorOwnMetric, own)
		}))
		t.Cleanup(srv.Close)
		return &scaleReplica{url: srv.URL}
	}
	check := func(reps ...*scaleReplica) error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		return checkFloorFetched(ctx, reps)
	}
	// The group appended 5 + 4 records for all; each fetched them and its
	// own deltas.
	if err := check(replica(5, 9+3, 3), replica(4, 9+2, 2)); err != nil {
		t.Fatalf("every record fetched: %v", err)
	}
	if err := check(replica(5, 9+3, 3), replica(4, 9, 2)); err == nil {
		t.Fatal("a floor replica that fetched the group's records but not its own deltas passed the check")
	}
}
