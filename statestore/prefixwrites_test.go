package statestore

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// sortByEngine against a stable comparison sort, on groups small (the
// insertion sort) and large (the radix sort), with repeated keys, keys
// sharing bytes, and all equal: the writes of one key must stay in arrival
// order, or an older write would replace a newer one.
func TestSortByEngineIsStable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tmp []prefixOp
	for _, n := range []int{0, 1, 2, 23, 24, 25, 100, 1000, 5000} {
		for _, keys := range []func() uint64{
			rng.Uint64,
			func() uint64 { return uint64(rng.IntN(n/4 + 1)) },             // repeats, high bytes all 0
			func() uint64 { return 0xabcd<<48 | uint64(rng.IntN(300))<<8 }, // shared high and low bytes
			func() uint64 { return 7 },
		} {
			ops := make([]prefixOp, n)
			for i := range ops {
				ops[i] = prefixOp{engine: keys(), voff: uint32(i)} // voff: arrival order
			}
			want := slices.Clone(ops)
			slices.SortStableFunc(want, func(x, y prefixOp) int {
				switch {
				case x.engine < y.engine:
					return -1
				case x.engine > y.engine:
					return 1
				}
				return 0
			})
			tmp = sortByEngine(ops, tmp)
			if !slices.Equal(ops, want) {
				t.Fatalf("n=%d: sorted %v, want %v", n, ops[:min(n, 20)], want[:min(n, 20)])
			}
		}
	}
}
