package statestore

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkRequestLookup: the idempotency lookup of POST /v1/route and of
// every lifecycle event, on a store holding 200,000 decisions spread over
// sstables (several flushes, then whatever compaction did), for request ids
// the store has never seen (nearly every route), for known ones, and for
// the 512 decided last (a lifecycle event soon after its decision).
func BenchmarkRequestLookup(b *testing.B) {
	h := newHarnessWith(b, 4, Options{})
	const n, chunk = 200_000, 5_000
	for i := 0; i < n; i += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for j := i; j < i+chunk; j++ {
			recs = append(recs, h.record("d1", decision(fmt.Sprintf("dec-%07d", j), fmt.Sprintf("req-%07d", j), "d1", 1e12+int64(j))))
		}
		h.apply(recs...)
		if err := h.s.db.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("tables per level: %v", tablesPerLevel(h.s.db))
	b.Run("unknown", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, ok := h.s.DecisionRefForRequest(fmt.Sprintf("new-%07d", i)); ok {
				b.Fatal("found")
			}
			i++
		}
	})
	b.Run("recent", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, ok := h.s.DecisionRefForRequest(fmt.Sprintf("req-%07d", n-1-i%512)); !ok {
				b.Fatal("not found")
			}
			i++
		}
	})
	b.Run("known", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, ok := h.s.DecisionRefForRequest(fmt.Sprintf("req-%07d", (i*7919)%n)); !ok {
				b.Fatal("not found")
			}
			i++
		}
	})
}

func tablesPerLevel(db *pebble.DB) []int64 {
	m := db.Metrics()
	out := make([]int64, len(m.Levels))
	for i := range m.Levels {
		out[i] = m.Levels[i].TablesCount
	}
	return out
}
