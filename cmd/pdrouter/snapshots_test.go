package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/statestore"
)

// --load-deltas snapshots writes deltas, reads peers' load from load
// shares, names the store's snapshot writer by --replica-id and starts its
// seq at the wall clock; the other modes leave both unset.
func TestLoadDeltasSnapshotsReachTheStore(t *testing.T) {
	a := &app{env: func(string) (string, bool) { return "", false }, log: slog.New(slog.DiscardHandler)}
	options := func(args ...string) (*routerFlags, statestore.Options) {
		t.Helper()
		rf := parseRouterFlags(t, nil, args...)
		if err := rf.validate(); err != nil {
			t.Fatal(err)
		}
		cfg, err := rf.decider.Config(a.env)
		if err != nil {
			t.Fatal(err)
		}
		return rf, (&routerRun{a: a, f: rf}).storeOptions(cfg, nil)
	}
	before := uint64(time.Now().UnixNano())
	rf, o := options("--load-deltas", "snapshots", "--replica-id", "router-7")
	after := uint64(time.Now().UnixNano())
	if !rf.writeDeltas || o.Source != statestore.SourceLoadShares || o.ReplicaID != "router-7" || o.SharesEpoch < before || o.SharesEpoch > after {
		t.Fatalf("snapshots: write deltas %v, source %s, replica %q, epoch %d; want true, load-shares, router-7 and an epoch in [%d, %d]",
			rf.writeDeltas, o.Source, o.ReplicaID, o.SharesEpoch, before, after)
	}
	if got := requiredTopics(rf.writeDeltas, rf.source); !slices.Equal(got, []events.Topic{events.TopicLoadDeltas, events.TopicLoadShares, events.TopicForwards}) {
		t.Fatalf("snapshots requires %v; want load-deltas, load-shares and forwards", got)
	}
	// Latency samples: the default, a rate, and none.
	for flag, want := range map[string]int{"": statestore.DefaultLatencySamplesPerSecond, "25": 25, "0": -1} {
		args := []string{"--load-deltas", "snapshots", "--replica-id", "router-7"}
		if flag != "" {
			args = append(args, "--latency-samples-per-second", flag)
		}
		if _, o := options(args...); o.LatencySamplesPerSecond != want {
			t.Errorf("--latency-samples-per-second %q: option %d, want %d", flag, o.LatencySamplesPerSecond, want)
		}
	}
	if err := parseRouterFlags(t, nil, "--latency-samples-per-second", "-1").validate(); err == nil || !strings.Contains(err.Error(), "--latency-samples-per-second") {
		t.Errorf("--latency-samples-per-second -1: %v", err)
	}
	rf, o = options("--load-deltas", "apply", "--replica-id", "router-7")
	if o.ReplicaID != "" || o.SharesEpoch != 0 {
		t.Fatalf("apply: replica %q, epoch %d; want no snapshot writer", o.ReplicaID, o.SharesEpoch)
	}
	if got := requiredTopics(rf.writeDeltas, rf.source); !slices.Equal(got, []events.Topic{events.TopicLoadDeltas}) {
		t.Fatalf("apply requires %v; want load-deltas", got)
	}
}

// A replica of --load-deltas snapshots refuses to start on a deployment
// without the load-shares topic, naming it and the fix.
func TestServeSnapshotsNeedsTheLoadSharesTopic(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	shares := events.Names{Prefix: prefix}.Physical(events.TopicLoadShares)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(kafkatest.Client(t, brokers)).DeleteTopics(ctx, shares); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, nil, "serve", "--brokers", strings.Join(brokers, ","), "--topic-prefix", prefix, "--data-dir", t.TempDir(),
		"--http-addr", "127.0.0.1:0", "--load-deltas", "snapshots", "--replica-id", "router-0")
	if err == nil || !strings.Contains(err.Error(), "the topic "+shares+" does not exist: run `pdrouter migrate`") {
		t.Fatalf("serve without %s: %v; want it named with the fix", shares, err)
	}
}

// A replica of --load-deltas snapshots starts on a migrated deployment,
// answers decisions, and appends their load deltas to its own partition of
// load-deltas (events.WriterPartition of its --replica-id), while the
// decisions stay in their decode worker's partition.
func TestServeSnapshotsWritesItsOwnPartition(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	names := events.Names{Prefix: prefix}
	r := startReplica(t, brokers, prefix, t.TempDir(), "--load-deltas", "snapshots")
	id := r.id
	after := registerFleet(t, r.url)
	for i := range 4 {
		routeOn(t, r.url, fmt.Sprintf("snap-%d", i), tokenSeq(uint32(1000*i+1), 300), after, false)
	}
	deltas, decisions := names.Physical(events.TopicLoadDeltas), names.Physical(events.TopicDecisions)
	td, err := kadm.NewClient(kafkatest.Client(t, brokers)).ListTopics(context.Background(), deltas, decisions)
	if err != nil {
		t.Fatal(err)
	}
	own := events.WriterPartition(id, int32(len(td[deltas].Partitions)), events.Cell{})
	recs := kafkatest.ReadAll(t, brokers, deltas)
	if len(recs) == 0 {
		t.Fatal("no load deltas written")
	}
	for _, rec := range recs {
		if rec.Partition != own {
			t.Fatalf("a load delta keyed %q in partition %d; want the replica's %d", rec.Key, rec.Partition, own)
		}
	}
	for _, rec := range kafkatest.ReadAll(t, brokers, decisions) {
		if want := events.KeyPartition(rec.Key, int32(len(td[decisions].Partitions))); rec.Partition != want {
			t.Fatalf("a decision keyed %q in partition %d; want its key's %d", rec.Key, rec.Partition, want)
		}
	}
	// Its own snapshots come back to it, and are no conflict: one more
	// route after the first came back makes a second.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		fams := scrapeFamilies(t, r.url)
		var applied float64
		for _, m := range fams["pdrouter_statestore_share_records_total"].GetMetric() {
			applied += m.GetCounter().GetValue()
		}
		if n := fams["pdrouter_statestore_replica_id_conflicts_total"].GetMetric()[0].GetCounter().GetValue(); n != 0 {
			t.Fatalf("%v replica id conflicts in a replica alone", n)
		}
		if applied >= 2 {
			break
		}
		if applied == 1 {
			routeOn(t, r.url, fmt.Sprintf("snap-more-%d", i), tokenSeq(uint32(9000+i), 300), after, false)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v of its snapshots read back after 30s", applied)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeSnapshotsReplicaIDConflict: two replicas started with one
// --replica-id both see, once each has written a snapshot, that another
// process writes under their id: they count it and log it.
func TestServeSnapshotsReplicaIDConflict(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	var reps []*replica
	for range 2 {
		reps = append(reps, startReplica(t, brokers, prefix, t.TempDir(), "--load-deltas", "snapshots", "--replica-id", "twin", "--fetch-min-bytes", "1"))
	}
	after := registerFleet(t, reps[0].url)
	conflicts := func(r *replica) float64 {
		m := scrapeFamilies(t, r.url)["pdrouter_statestore_replica_id_conflicts_total"]
		if m == nil || len(m.GetMetric()) != 1 {
			t.Fatalf("%s: no series pdrouter_statestore_replica_id_conflicts_total", r.url)
		}
		return m.GetMetric()[0].GetCounter().GetValue()
	}
	for _, r := range reps {
		if n := conflicts(r); n != 0 {
			t.Fatalf("%s: %v conflicts before anyone routed", r.url, n)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; conflicts(reps[0]) == 0 || conflicts(reps[1]) == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("conflicts after 30s: %v and %v", conflicts(reps[0]), conflicts(reps[1]))
		}
		for j, r := range reps {
			routeOn(t, r.url, fmt.Sprintf("twin-%d-%d", j, i), tokenSeq(uint32(1000*i+j), 64), after, false)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, r := range reps {
		if !strings.Contains(r.logs.String(), "another replica writes load shares under this replica's --replica-id") {
			t.Errorf("%s logged no conflict:\n%s", r.url, r.logs.String())
		}
	}
}

// TestServeSnapshotsShareLatencySamples: requests routed and ended on one
// replica of --load-deltas snapshots teach the other replica's latency
// model too: what the first joined goes with its snapshots.
func TestServeSnapshotsShareLatencySamples(t *testing.T) {
	a, b, after := snapshotPair(t)
	const n = 6
	for i := range n {
		id := fmt.Sprintf("lat-%d", i)
		routeOn(t, a.url, id, tokenSeq(uint32(500*i+1), 200), after, false)
		for _, ev := range []map[string]any{{"event": "prefill_done", "ttft_ms": 100 + 10*i}, {"event": "completed", "output_tokens": 20, "itl_ms_mean": 12.5}} {
			if code, raw, err := post(a.url+"/v1/requests/"+id+"/events", ev); err != nil || code != http.StatusAccepted {
				t.Fatalf("%s %v: %d %s %v", id, ev["event"], code, raw, err)
			}
		}
	}
	samples := func(r *replica, result string) float64 {
		for _, m := range scrapeFamilies(t, r.url)["pdrouter_statestore_latency_samples_total"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("%s: no series pdrouter_statestore_latency_samples_total{result=%q}", r.url, result)
		return 0
	}
	entries := func(r *replica) float64 {
		return scrapeFamilies(t, r.url)["pdrouter_latency_model_entries"].GetMetric()[0].GetGauge().GetValue()
	}
	deadline := time.Now().Add(30 * time.Second)
	for samples(a, "sent") < n || samples(b, "learned") < n || entries(b) < n {
		if time.Now().After(deadline) {
			var dropped []string
			for _, r := range []*replica{a, b} {
				for _, m := range scrapeFamilies(t, r.url)["pdrouter_latency_model_dropped_total"].GetMetric() {
					dropped = append(dropped, fmt.Sprintf("%s %v=%v", r.url, m.GetLabel(), m.GetCounter().GetValue()))
				}
			}
			t.Fatalf("after 30s: a sent %v (holds %v model entries), b learned %v and holds %v; want %d each; dropped %v",
				samples(a, "sent"), entries(a), samples(b, "learned"), entries(b), n, dropped)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := samples(a, "learned") + samples(b, "sent"); got != 0 {
		t.Fatalf("a learned or b sent %v samples; only a's requests ended", got)
	}
}

// snapshotPair starts two replicas of --load-deltas snapshots on new topics
// of the real broker, fetching as soon as a record is there, and registers
// the fleet of registerFleet through the first.
func snapshotPair(t *testing.T) (a, b *replica, after map[string]map[string]int64) {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	a = startReplica(t, brokers, prefix, t.TempDir(), "--load-deltas", "snapshots", "--fetch-min-bytes", "1")
	b = startReplica(t, brokers, prefix, t.TempDir(), "--load-deltas", "snapshots", "--fetch-min-bytes", "1")
	return a, b, registerFleet(t, a.url)
}
