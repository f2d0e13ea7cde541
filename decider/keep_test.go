package decider

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pdrouter/pdrouter/internal/testsize"
)

// randomTable is a table of nd decode and np prefill rows in table order,
// with random eligibility and costs (many tied), and one pick per pool.
func randomTable(rng *rand.Rand, nd, np int) []Candidate {
	rows := make([]Candidate, 0, nd+np)
	for i := range nd + np {
		pool := PoolDecode
		if i >= nd {
			pool = PoolPrefill
		}
		r := Candidate{Worker: fmt.Sprintf("%s-%05d", pool, i), Pool: pool, Eligible: rng.IntN(4) > 0}
		if r.Eligible {
			r.Cost = float64(rng.IntN(20))
			r.TieHash = Hash64(rng.Uint64())
		}
		rows = append(rows, r)
	}
	if i := pickMin(rows[:nd]); i >= 0 {
		rows[i].Picked = true
	}
	if i := pickMin(rows[nd:]); i >= 0 {
		rows[nd+i].Picked = true
	}
	return rows
}

// TestKeepRows: at most k rows, in table order, the picks always among
// them, each pool getting its share, and no omitted eligible row ranked
// above a kept eligible row of its pool. Its code runs on one goroutine, so
// under -race it checks a sample of its tables (internal/testsize).
func TestKeepRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for range testsize.Cases(2000, 200) {
		nd, np, k := rng.IntN(300), rng.IntN(60), 2+rng.IntN(60)
		rows := randomTable(rng, nd, np)
		keep := KeepRows(rows, k, nil)
		if len(rows) <= k {
			if keep != nil {
				t.Fatalf("%d rows fit in %d but KeepRows chose %v", len(rows), k, keep)
			}
			continue
		}
		if len(keep) != k || !slices.IsSorted(keep) {
			t.Fatalf("%d+%d rows, k %d: kept %d rows, sorted %v", nd, np, k, len(keep), slices.IsSorted(keep))
		}
		kept := map[int]bool{}
		for _, i := range keep {
			kept[i] = true
		}
		keptIn := map[Pool]int{}
		for i := range rows {
			if rows[i].Picked && !kept[i] {
				t.Fatalf("picked row %s omitted", rows[i].Worker)
			}
			if kept[i] {
				keptIn[rows[i].Pool]++
			}
		}
		if want := min(np, max(k/2, k-nd)); keptIn[PoolPrefill] != want {
			t.Fatalf("%d+%d rows, k %d: kept %d prefill rows, want %d", nd, np, k, keptIn[PoolPrefill], want)
		}
		for i := range rows {
			for j := range rows {
				o, kp := &rows[i], &rows[j]
				if kept[i] || !kept[j] || o.Pool != kp.Pool || !o.Eligible || kp.Picked {
					continue
				}
				if !kp.Eligible || better(o, kp) {
					t.Fatalf("omitted %+v ranks above kept %+v", *o, *kp)
				}
			}
		}
	}
}

// BenchmarkKeepRows: the cost of bounding a table of 17k rows, paid only
// by decisions over --decision-max-candidates.
func BenchmarkKeepRows(b *testing.B) {
	rows := randomTable(rand.New(rand.NewPCG(1, 2)), 17000, 32)
	var dst []int
	b.ReportAllocs()
	for b.Loop() {
		dst = KeepRows(rows, 256, dst)
	}
}
