package statestore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

const crashChildEnv = "PDR_STATESTORE_CRASH_CHILD"

// TestCrashChild is the process the crash test kills: it materializes the
// topics into the store until it is killed. It does nothing in a normal
// run.
func TestCrashChild(t *testing.T) {
	spec := os.Getenv(crashChildEnv)
	if spec == "" {
		t.Skip("only run as the crash test's child process")
	}
	parts := strings.Split(spec, "|") // dir|brokers|prefix
	s, err := Open(parts[0], Options{Names: events.Names{Prefix: parts[2]}, Registerer: prometheus.NewRegistry(),
		MemTableSize: 256 << 10, ChunkRecords: 64})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMaterializer(s, MaterializerOptions{Client: []kgo.Opt{kgo.SeedBrokers(strings.Split(parts[1], ",")...), kgo.FetchMaxPartitionBytes(4 << 10)}})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("child: consuming")
	go reportFlushes(s)
	_ = m.Run(context.Background()) // until SIGKILL
}

// reportFlushes prints a line each time Pebble has flushed a memtable since
// the child opened the store: with the WAL off, a flush is what makes
// applied records survive a kill, and the only writer is the materializer,
// so it is the child's first durable progress the crash test waits for.
func reportFlushes(s *Store) {
	base := s.db.Metrics().Flush.Count
	for n := base; ; time.Sleep(5 * time.Millisecond) {
		if c := s.db.Metrics().Flush.Count; c > n {
			n = c
			fmt.Printf("%s %d\n", childFlushed, n-base)
		}
	}
}

// childFlushed starts the child's line for each flush.
const childFlushed = "child: flushed"

// childOutput collects a child's output and closes flushed once the child
// has said it flushed (reportFlushes).
type childOutput struct {
	mu      sync.Mutex
	b       strings.Builder
	flushed chan struct{}
	once    sync.Once
}

func (o *childOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	o.b.Write(p)
	seen := strings.Contains(o.b.String(), childFlushed)
	o.mu.Unlock()
	if seen {
		o.once.Do(func() { close(o.flushed) })
	}
	return len(p), nil
}

func (o *childOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// Invariant 2: a replica killed with SIGKILL at random points, many times,
// always restarts to a state equal to a clean replay at the offsets it
// stored; and deleting the store and replaying reaches the same digest.
func TestCrashRecovery(t *testing.T) {
	// Long and self-contained: it runs at the same time as the
	// package's other long tests.
	t.Parallel()
	if testing.Short() {
		t.Skip("crash test: not in -short")
	}
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	names := events.Names{Prefix: prefix}
	dir := filepath.Join(t.TempDir(), "store")
	gen := newGenerator(77, 16)
	rng := rand.New(rand.NewPCG(7, 7))
	pending := gen.events(2000)
	type point struct {
		d    Digest
		snap string
	}
	var points []point
	const kills = 12
	for i := 0; i < kills; i++ {
		produce(t, brokers, prefix, pending)
		pending = nil
		for j := 0; j < 1500; j++ {
			pending = append(pending, gen.next())
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir+"|"+strings.Join(brokers, ",")+"|"+prefix)
		out := &childOutput{flushed: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		// Kill at a random point after the child's first durable progress,
		// not after a fixed time from its start: a loaded machine (-race,
		// other tests) can take longer than any fixed time to start the
		// child, open the store and fetch, and a kill before any flush
		// tests nothing.
		select {
		case <-out.flushed:
		case <-exited:
			t.Fatalf("kill %d: the child exited before it flushed:\n%s", i, out)
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
			t.Fatalf("kill %d: the child flushed nothing in 2 minutes:\n%s", i, out)
		}
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		if strings.Contains(out.String(), "FAIL") {
			t.Fatalf("child failed:\n%s", out)
		}
		// Reopen what the killed process left: it must open, and its
		// digest is checked against a clean replay below.
		s, err := Open(dir, Options{Names: names, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatalf("kill %d: the store does not reopen: %v", i, err)
		}
		d, err := s.Digest()
		if err != nil {
			t.Fatal(err)
		}
		snap := filepath.Join(t.TempDir(), "snap")
		if _, err := s.Checkpoint(snap); err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		points = append(points, point{d, snap})
		t.Logf("kill %d: offsets sum %d", i, sumOffsets(d.Offsets))
	}
	produce(t, brokers, prefix, pending)

	// The whole log, by partition, for clean replays at any offset vector.
	log := readAll(t, brokers, names)
	progressed := 0
	for i, p := range points {
		if i > 0 && sumOffsets(p.d.Offsets) > sumOffsets(points[i-1].d.Offsets) {
			progressed++
		}
		want, wantKeys := cleanReplay(t, log, names, p.d.Offsets)
		if want.Hash != p.d.Hash {
			s, err := OpenFromSnapshot(p.snap, filepath.Join(t.TempDir(), "x"), Options{Names: names, Registerer: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			d := diffKeys(dumpKeys(t, s), wantKeys)
			t.Fatalf("kill %d: store %s at %s, clean replay %s\n%d keys differ: %v", i, p.d, p.d.Offsets, want, len(d), d[:min(10, len(d))])
		}
	}
	if progressed < kills/2 {
		t.Fatalf("the children made progress in only %d of %d runs: the test proves little", progressed, kills)
	}
	// Finish the crashed store, and replay into a new one: same digest.
	r := openReplica(t, dir, brokers, prefix)
	got := r.catchUp(t)
	fresh := openReplica(t, filepath.Join(t.TempDir(), "fresh"), brokers, prefix)
	if want := fresh.catchUp(t); want.Hash != got.Hash || want.Offsets.String() != got.Offsets.String() {
		d := diffKeys(dumpKeys(t, r.s), dumpKeys(t, fresh.s))
		t.Fatalf("crashed store caught up to %s at %s, fresh replay %s at %s\n%d keys differ: %v", got, got.Offsets, want, want.Offsets, len(d), d[:min(10, len(d))])
	}
}

func sumOffsets(o Offsets) int64 {
	var n int64
	for _, p := range o {
		n += p.Next
	}
	return n
}

// readAll reads every record of every topic.
func readAll(t *testing.T, brokers []string, names events.Names) []*kgo.Record {
	t.Helper()
	var topics []string
	for _, tp := range events.AllTopics {
		topics = append(topics, names.Physical(tp))
	}
	_, m := openMaterializer(t, brokers, Options{Names: names, Registerer: prometheus.NewRegistry()})
	lag, err := m.Lag(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cl := kafkatest.Client(t, brokers, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var out []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for int64(len(out)) < lag.Total {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", len(out), lag.Total, err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// cleanReplay applies, to a new store, exactly the records below offs.
func cleanReplay(t *testing.T, log []*kgo.Record, names events.Names, offs Offsets) (Digest, map[string]string) {
	t.Helper()
	var recs []*kgo.Record
	for _, r := range log {
		tp, _ := names.Logical(r.Topic)
		if next, ok := offs.Get(tp, r.Partition); ok && r.Offset < next {
			recs = append(recs, r)
		}
	}
	s, err := Open(filepath.Join(t.TempDir(), "clean"), Options{Names: names, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Apply(recs); err != nil {
		t.Fatal(err)
	}
	return mustDigest(t, s), dumpKeys(t, s)
}
