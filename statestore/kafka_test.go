package statestore

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// Against the real broker (PDR_TEST_BROKERS; skipped without it, failed
// under CI=true): two replicas on the same topics reach identical digests
// at identical offsets, and a third bootstrapped from the first's snapshot
// over HTTP, then tailing the log, reaches the same digest.
func TestRealKafkaReplicasAndSnapshot(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	gen := newGenerator(31, 12)
	produce(t, brokers, prefix, gen.events(4000))
	dir := t.TempDir()
	a := openReplica(t, filepath.Join(dir, "a"), brokers, prefix)
	b := openReplica(t, filepath.Join(dir, "b"), brokers, prefix)
	da, db := a.catchUp(t), b.catchUp(t)
	if da.Hash != db.Hash || da.Offsets.String() != db.Offsets.String() {
		t.Fatalf("replicas differ: %s at %s vs %s at %s", da, da.Offsets, db, db.Offsets)
	}
	if sumOffsets(da.Offsets) != 4000 {
		t.Fatalf("applied %d records, want 4000", sumOffsets(da.Offsets))
	}

	srv := httptest.NewServer(a.s.SnapshotHandler(filepath.Join(dir, "tmp")))
	defer srv.Close()
	var more []genEvent
	for i := 0; i < 2000; i++ {
		more = append(more, gen.next())
	}
	produce(t, brokers, prefix, more)
	s, man, err := BootstrapFromPeer(context.Background(), srv.Client(), srv.URL, filepath.Join(dir, "c"),
		Options{Names: events.Names{Prefix: prefix}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if man.Offsets.String() != da.Offsets.String() {
		t.Fatalf("snapshot at %s, want %s", man.Offsets, da.Offsets)
	}
	m, err := NewMaterializer(s, MaterializerOptions{Client: []kgo.Opt{kgo.SeedBrokers(brokers...)}})
	if err != nil {
		t.Fatal(err)
	}
	c := &replica{s, m}
	t.Cleanup(c.close)
	dc := c.catchUp(t)
	da, db = a.catchUp(t), b.catchUp(t)
	if dc.Hash != da.Hash || dc.Offsets.String() != da.Offsets.String() || db.Hash != da.Hash {
		t.Fatalf("after tailing: a %s, b %s, c (from snapshot) %s", da, db, dc)
	}
	if sumOffsets(dc.Offsets) != 6000 {
		t.Fatalf("applied %d records, want 6000", sumOffsets(dc.Offsets))
	}
	t.Logf("3 replicas agree: %s at %d records", dc, sumOffsets(dc.Offsets))
}
