package memview_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/decider/memview"
)

// TestMatchAgainstReference drives random stores, evictions and active marks (runs of
// chains, single blocks, shared prefixes, 70 workers so bitsets span two words) and
// compares MatchPrefix and MatchActive with a naive per-worker walk. It guards the
// walk's shortcuts (successor hints, sameAsPrev skips) against giving a different
// answer from the definition.
func TestMatchAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const nWorkers = 70
	type holding struct{ tiers [3]map[uint64]bool }
	for iter := range 40 {
		v := memview.New()
		ref := make([]holding, nWorkers)
		active := make([]map[uint64]bool, nWorkers)
		sizes := make([]int, nWorkers)
		for w := range nWorkers {
			sizes[w] = []int{16, 32}[rng.IntN(2)]
			v.Add(decider.WorkerInfo{ID: fmt.Sprintf("w%02d", w), BlockSize: sizes[w]})
			for tr := range 3 {
				ref[w].tiers[tr] = map[uint64]bool{}
			}
			active[w] = map[uint64]bool{}
		}
		// A few chains sharing prefixes, as prompts with a common system prompt do.
		base := make([]uint64, 60)
		for i := range base {
			base[i] = rng.Uint64()
		}
		chains := [][]uint64{base}
		for range 3 {
			c := append([]uint64(nil), base[:rng.IntN(len(base))]...)
			for len(c) < 60 {
				c = append(c, rng.Uint64())
			}
			chains = append(chains, c)
		}
		for range 400 {
			w := rng.IntN(nWorkers)
			id := fmt.Sprintf("w%02d", w)
			c := chains[rng.IntN(len(chains))]
			a := rng.IntN(len(c))
			b := a + rng.IntN(len(c)-a+1)
			tier := rng.IntN(3)
			switch op := rng.IntN(10); {
			case op < 6:
				v.Store(id, memview.Tier(tier), c[a:b]...)
				for _, h := range c[a:b] {
					ref[w].tiers[tier][h] = true
				}
			case op < 8:
				v.Evict(id, memview.Tier(tier), c[a:b]...)
				for _, h := range c[a:b] {
					delete(ref[w].tiers[tier], h)
				}
			default:
				v.MarkActive(id, c[:b]...)
				for _, h := range c[:b] {
					active[w][h] = true
				}
			}
		}
		for _, c := range chains {
			for _, bs := range []int{16, 32} {
				dst := make([]decider.TierOverlap, nWorkers)
				shared := make([]int, nWorkers)
				v.MatchPrefix(bs, c, dst)
				v.MatchActive(bs, c, shared)
				for w := range nWorkers {
					var want decider.TierOverlap
					wantShared := 0
					if sizes[w] == bs {
						run := func(ok func(h uint64) bool) int {
							n := 0
							for n < len(c) && ok(c[n]) {
								n++
							}
							return n
						}
						t := ref[w].tiers
						d := run(func(h uint64) bool { return t[0][h] })
						dh := run(func(h uint64) bool { return t[0][h] || t[1][h] })
						all := run(func(h uint64) bool { return t[0][h] || t[1][h] || t[2][h] })
						want = decider.TierOverlap{Device: d, Host: dh - d, Disk: all - dh}
						wantShared = run(func(h uint64) bool { return active[w][h] })
					}
					if dst[w] != want {
						t.Fatalf("iter %d worker %d bs %d: %+v, want %+v", iter, w, bs, dst[w], want)
					}
					if shared[w] != wantShared {
						t.Fatalf("iter %d worker %d bs %d: shared %d, want %d", iter, w, bs, shared[w], wantShared)
					}
				}
			}
		}
	}
}
