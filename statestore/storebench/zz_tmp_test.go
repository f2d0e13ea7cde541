package storebench

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/statestore"
)

func TestTmpDist(t *testing.T) {
	names := events.Names{}
	w := NewWorkload(names, 128, 16, 2)
	s, err := OpenStore(filepath.Join(t.TempDir(), "s"), names)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, _ := w.Records(1_000_000, 0)
	_ = ApplyAll(s, w.Registrations())
	_ = ApplyAll(s, recs)
	recs = nil
	runtime.GC()
	rng := rand.New(rand.NewPCG(9, 9))
	var chains [][]uint64
	for len(chains) < 256 {
		i := rng.IntN(w.Workers)
		cs := w.Conversations[i]
		if len(cs) == 0 {
			continue
		}
		chains = append(chains, w.Chain(cs[rng.IntN(len(cs))], 1000))
	}
	type q struct {
		d     time.Duration
		depth int
		ci    int
	}
	var qs []q
	depthOf := make([]int, len(chains))
	s.Read(func(v statestore.View) {
		dst := make([]decider.TierOverlap, len(v.Workers()))
		for i, ch := range chains {
			v.MatchPrefix(16, ch, dst)
			best := 0
			for _, o := range dst {
				best = max(best, o.Total())
			}
			depthOf[i] = best
		}
		for n := 0; n < 20000; n++ {
			ci := n % len(chains)
			start := time.Now()
			v.MatchPrefix(16, chains[ci], dst)
			qs = append(qs, q{time.Since(start), depthOf[ci], ci})
		}
	})
	slices.SortFunc(qs, func(a, b q) int { return int(a.d - b.d) })
	fmt.Println("p50", qs[len(qs)/2], "p90", qs[len(qs)*9/10], "p99", qs[len(qs)*99/100], "max", qs[len(qs)-1])
	ds := slices.Clone(depthOf)
	slices.Sort(ds)
	fmt.Println("depth p50", ds[len(ds)/2], "p90", ds[len(ds)*9/10], "p99", ds[len(ds)*99/100], "max", ds[len(ds)-1])
	// per-chain median latency for the deepest chains
	per := map[int][]time.Duration{}
	for _, x := range qs {
		per[x.ci] = append(per[x.ci], x.d)
	}
	type cm struct{ depth int; med time.Duration }
	var cms []cm
	for ci, l := range per {
		slices.Sort(l)
		cms = append(cms, cm{depthOf[ci], l[len(l)/2]})
	}
	slices.SortFunc(cms, func(a, b cm) int { return b.depth - a.depth })
	fmt.Println("deepest chains (depth, median latency):", cms[:8])
	meds := make([]time.Duration, len(cms))
	for i := range cms { meds[i] = cms[i].med }
	slices.Sort(meds)
	fmt.Println("per-chain medians p50", meds[len(meds)/2], "p99", meds[len(meds)*99/100], "max", meds[len(meds)-1])
}
