package statestore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// produce writes generated events under prefix, with increasing
// timestamps (the tombstone rule of load.go compares them).
func produce(t testing.TB, brokers []string, prefix string, evs []genEvent) {
	t.Helper()
	cl := kafkatest.Client(t, brokers, kgo.ProducerLinger(5*time.Millisecond))
	names := events.Names{Prefix: prefix}
	var recs []*kgo.Record
	for _, e := range evs {
		var r *kgo.Record
		if e.msg == nil {
			r = events.NewTombstone(names, e.key)
		} else {
			var err error
			if r, err = events.NewRecord(names, []byte(e.key), e.msg); err != nil {
				t.Fatal(err)
			}
		}
		r.Timestamp = time.UnixMilli(produceClock.Add(1))
		recs = append(recs, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// produceClock stamps produced records, increasing across calls, as one
// wall clock would, from an hour back (inside every topic's declared
// retention; kafkatest.Migrate also turns retention off, see there).
var produceClock = func() *atomic.Int64 {
	var c atomic.Int64
	c.Store(time.Now().Add(-time.Hour).UnixMilli())
	return &c
}()

type replica struct {
	s *Store
	m *Materializer
}

func openReplica(t testing.TB, dir string, brokers []string, prefix string) *replica {
	t.Helper()
	return openReplicaWith(t, dir, brokers, Options{Names: events.Names{Prefix: prefix}})
}

// openReplicaWith is openReplica with the store's options (a registry of
// its own unless o names one).
func openReplicaWith(t testing.TB, dir string, brokers []string, o Options) *replica {
	t.Helper()
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMaterializer(s, MaterializerOptions{Client: []kgo.Opt{kgo.SeedBrokers(brokers...)}, ProgressEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{s, m}
	t.Cleanup(r.close)
	return r
}

func (r *replica) close() {
	if r.m != nil {
		r.m.Close()
		r.m = nil
	}
	if r.s != nil {
		_ = r.s.Close()
		r.s = nil
	}
}

func (r *replica) catchUp(t testing.TB) Digest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := r.m.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := r.s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Two replicas on the same topics reach the same digest at the same
// offsets; a restarted one resumes where it stopped.
func TestMaterializerReplicasAgree(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	evs := newGenerator(11, 10).events(3000)
	produce(t, brokers, prefix, evs[:2000])
	dir := t.TempDir()
	a := openReplica(t, filepath.Join(dir, "a"), brokers, prefix)
	b := openReplica(t, filepath.Join(dir, "b"), brokers, prefix)
	da, db := a.catchUp(t), b.catchUp(t)
	if da.Hash != db.Hash || da.Offsets.String() != db.Offsets.String() {
		t.Fatalf("replicas differ: %s at %s vs %s at %s", da, da.Offsets, db, db.Offsets)
	}
	var n int64
	for _, p := range da.Offsets {
		n += p.Next
	}
	if n != 2000 {
		t.Fatalf("offsets sum to %d, want 2000", n)
	}
	// b restarts and both apply the rest.
	b.close()
	b = openReplica(t, filepath.Join(dir, "b"), brokers, prefix)
	produce(t, brokers, prefix, evs[2000:])
	da, db = a.catchUp(t), b.catchUp(t)
	if da.Hash != db.Hash || da.Offsets.String() != db.Offsets.String() {
		t.Fatalf("after restart: %s at %s vs %s at %s", da, da.Offsets, db, db.Offsets)
	}
	ctx := context.Background()
	ready, lag, err := a.m.Ready(ctx, 0)
	if err != nil || !ready || lag.Total != 0 {
		t.Fatalf("ready=%v lag=%+v err=%v", ready, lag, err)
	}
}

// A record that does not decode is counted, skipped, and its offset still
// advances.
func TestMaterializerSkipsInvalidRecords(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	names := events.Names{Prefix: prefix}
	cl := kafkatest.Client(t, brokers)
	bad := []*kgo.Record{
		{Topic: names.Physical(events.TopicLoad), Key: []byte("w"), Value: []byte("junk")},
		{Topic: names.Physical(events.TopicLoad), Key: []byte("w"), Value: []byte{0xff, 0xff},
			Headers: []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte(events.SchemaOf(events.TopicLoad))}}},
	}
	if err := cl.ProduceSync(context.Background(), bad...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	produce(t, brokers, prefix, newGenerator(1, 3).events(20))
	reg := prometheus.NewRegistry()
	s, m := openMaterializer(t, brokers, Options{Names: names, Registerer: reg})
	if err := m.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.met.decode.Invalid.WithLabelValues("load", "missing_schema")) +
		testutil.ToFloat64(s.met.decode.Invalid.WithLabelValues("load", "malformed")); got != 2 {
		t.Fatalf("invalid records counted: %v, want 2", got)
	}
	lag, err := m.Lag(context.Background())
	if err != nil || lag.Total != 0 {
		t.Fatalf("lag %+v err %v: the invalid records' offsets must advance", lag, err)
	}
}

// A stored offset that retention has passed is not skipped silently: Run
// stops with ErrRebuildNeeded.
func TestMaterializerOffsetOutOfRangeNeedsRebuild(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	evs := newGenerator(5, 4).events(400)
	produce(t, brokers, prefix, evs[:200])
	dir := filepath.Join(t.TempDir(), "s")
	r := openReplica(t, dir, brokers, prefix)
	r.catchUp(t)
	r.close()
	produce(t, brokers, prefix, evs[200:])
	// Delete every record of every partition: the stored offsets are now
	// below the log start wherever the store had read something.
	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	ctx := context.Background()
	ends, err := adm.ListEndOffsets(ctx, events.Names{Prefix: prefix}.Physical(events.TopicKvEvents))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.DeleteRecords(ctx, ends.Offsets()); err != nil {
		t.Fatal(err)
	}
	r = openReplica(t, dir, brokers, prefix)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = r.m.Run(rctx)
	if !errors.Is(err, ErrRebuildNeeded) {
		t.Fatalf("Run: %v, want ErrRebuildNeeded", err)
	}
	t.Logf("as expected: %v", err)
}

// TestMaterializerFetchOptions: the fetch batch options reach the
// consumer the materializer builds (franz-go reports its settings), the
// defaults fetch every record at once, and a wait franz-go refuses is an
// error up front.
func TestMaterializerFetchOptions(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	produce(t, brokers, prefix, newGenerator(5, 4).events(50))
	for _, tc := range []struct {
		opts     MaterializerOptions
		minBytes int32
		maxWait  time.Duration
	}{
		{MaterializerOptions{}, 1, 500 * time.Millisecond},
		{MaterializerOptions{FetchMinBytes: 4096, FetchMaxWait: 30 * time.Millisecond}, 4096, 30 * time.Millisecond},
	} {
		s, err := Open(t.TempDir(), Options{Names: events.Names{Prefix: prefix}, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		tc.opts.Client = []kgo.Opt{kgo.SeedBrokers(brokers...)}
		m, err := NewMaterializer(s, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{s, m}
		r.catchUp(t)
		if got := m.cl.OptValue(kgo.FetchMinBytes); got != tc.minBytes {
			t.Errorf("%+v: consumer fetch min bytes %v; want %d", tc.opts, got, tc.minBytes)
		}
		if got := m.cl.OptValue(kgo.FetchMaxWait); got != tc.maxWait {
			t.Errorf("%+v: consumer fetch max wait %v; want %s", tc.opts, got, tc.maxWait)
		}
		r.close()
	}
	s, err := Open(t.TempDir(), Options{Names: events.Names{Prefix: prefix}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := NewMaterializer(s, MaterializerOptions{Client: []kgo.Opt{kgo.SeedBrokers(brokers...)}, FetchMaxWait: 5 * time.Millisecond}); err == nil ||
		!strings.Contains(err.Error(), "fetch max wait 5ms: want at least 10ms") {
		t.Fatalf("a 5ms fetch wait: %v; want a precise error", err)
	}
}

// TestLagErrorRetriable: CatchUp asks for the end offsets again after an
// error the brokers clear by themselves (a leader election on a new topic,
// which kadm returns as a shard error), and gives up on any other.
func TestLagErrorRetriable(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"a leader election, as a shard error", fmt.Errorf("statestore: list end offsets: %w",
			&kadm.ShardErrors{Name: "ListOffsets", Errs: []kadm.ShardError{{Err: kerr.LeaderNotAvailable}}}), true},
		{"a leader election", fmt.Errorf("wrapped: %w", kerr.NotLeaderForPartition), true},
		{"one shard not authorized", &kadm.ShardErrors{Name: "ListOffsets", Errs: []kadm.ShardError{
			{Err: kerr.LeaderNotAvailable}, {Err: kerr.TopicAuthorizationFailed}}}, false},
		{"not authorized", kerr.TopicAuthorizationFailed, false},
		{"canceled", context.Canceled, false},
		{"no error", nil, false},
	} {
		if got := lagErrorRetriable(c.err); got != c.want {
			t.Errorf("%s: retriable %v, want %v", c.name, got, c.want)
		}
	}
}

// TestMaterializerCloseWhileRunning: Close while Run is still starting (a
// replica that stops at once, as serve does on a missing topic) is safe
// under the race detector, and Run then returns without a consumer left
// open.
func TestMaterializerCloseWhileRunning(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	for range 5 {
		s, err := Open(t.TempDir(), Options{Names: events.Names{Prefix: prefix}, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewMaterializer(s, MaterializerOptions{Client: []kgo.Opt{kgo.SeedBrokers(brokers...)}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		m.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run after Close: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run still runs 30s after Close")
		}
		cancel()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
