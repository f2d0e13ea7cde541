package storebench

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/statestore"
)

// The table's run at a tiny size, so the bench command keeps working.
func TestRunSmall(t *testing.T) {
	var out bytes.Buffer
	res, err := Run(context.Background(), Config{Workers: 8, Entries: 20_000, Queries: 200, ApplyBlockOps: 20_000, ReplayBlockOps: 20_000, E2EBlockOps: 5_000, Dir: t.TempDir()}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 8 {
		t.Fatalf("%d rows:\n%s", len(res), out.String())
	}
	t.Logf("\n%s", out.String())
}

// BenchmarkApply: block ops per second into Pebble and the index (the
// records are built before the timer starts), and the process's CPU time
// per block op, which a shared machine disturbs less than the rate.
func BenchmarkApply(b *testing.B) {
	names := events.Names{}
	w := NewWorkload(names, 128, 16, 1)
	s, err := OpenStore(filepath.Join(b.TempDir(), "s"), names)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	_ = ApplyAll(s, w.Registrations())
	recs, ops := w.Records(b.N*16, 8000)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	cpu0, cpuOK := processCPU()
	if err := ApplyAll(s, recs); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(ops)/time.Since(start).Seconds(), "blockops/s")
	// Flushes and compactions the apply started go on after it: the CPU
	// figure counts what they did by now, so it is a lower bound.
	if cpu1, ok := processCPU(); ok && cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/float64(ops), "cpu-ns/blockop")
	}
}

var benchStore struct {
	s *statestore.Store
	w *Workload
}

// BenchmarkMatchPrefix: one 1,000-block overlap query over 128 workers and
// 1M cached entries (built once, ~5 s).
func BenchmarkMatchPrefix(b *testing.B) {
	if benchStore.s == nil {
		names := events.Names{}
		w := NewWorkload(names, 128, 16, 2)
		s, err := OpenStore(filepath.Join(b.TempDir(), "s"), names)
		if err != nil {
			b.Fatal(err)
		}
		recs, _ := w.Records(1_000_000, 0)
		_ = ApplyAll(s, w.Registrations())
		if err := ApplyAll(s, recs); err != nil {
			b.Fatal(err)
		}
		benchStore.s, benchStore.w = s, w
	}
	var chains [][]uint64
	for i := 0; i < 64; i++ {
		cs := benchStore.w.Conversations[i%128]
		chains = append(chains, benchStore.w.Chain(cs[i%len(cs)], 1000))
	}
	benchStore.s.Read(func(v statestore.View) {
		dst := make([]decider.TierOverlap, len(v.Workers()))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			v.MatchPrefix(16, chains[i%len(chains)], dst)
		}
	})
}

// The apply workload's digest, pinned: the store's content for a given log
// is part of its format (replicas compare digests), so a change to how the
// apply path writes must leave it as it is. 128 workers holding at most
// 400 blocks each, so that evictions are in it.
func TestApplyWorkloadDigest(t *testing.T) {
	names := events.Names{}
	w := NewWorkload(names, 128, 16, 1)
	s, err := OpenStore(filepath.Join(t.TempDir(), "s"), names)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, ops := w.Records(200_000, 400)
	if err := ApplyAll(s, append(w.Registrations(), recs...)); err != nil {
		t.Fatal(err)
	}
	d, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	// The store's schema version is in its keyspace, so the digest moves with
	// it: this is schema 7's (schema 6 gave add313eb9428d101089dbe6ea698e098
	// for the same keys and values).
	const want = "b146c2dcfd1a4a90ac88677a348171db"
	if d.String() != want {
		t.Fatalf("digest of %d block ops: %s (%d keys), want %s", ops, d, d.Keys, want)
	}
}
