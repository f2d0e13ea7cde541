package statestore

import (
	"math/rand/v2"
	"testing"
)

// The hand-rolled hash tables agree with a Go map under random puts and
// deletes, including small sequential keys (clustered probes) and key 0.
func TestTablesAgreeWithMap(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  func(r *rand.Rand) uint64
	}{
		{"random", func(r *rand.Rand) uint64 { return r.Uint64() }},
		{"sequential", func(r *rand.Rand) uint64 { return uint64(r.IntN(3000)) }},
		{"aligned", func(r *rand.Rand) uint64 { return uint64(r.IntN(3000)) << 40 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			model := map[uint64]uint64{}
			var et engTable
			var um u64map
			for i := 0; i < 50_000; i++ {
				k := tc.key(r)
				if r.IntN(3) == 0 {
					delete(model, k)
					um.del(k)
					if k != 0 {
						et.del(k)
					}
				} else {
					v := r.Uint64()
					model[k] = v
					um.put(k, v)
					et.put(k, v, uint8(v&7))
				}
			}
			if um.len() != len(model) {
				t.Fatalf("u64map len %d, model %d", um.len(), len(model))
			}
			for k, v := range model {
				if got, ok := um.get(k); !ok || got != v {
					t.Fatalf("u64map[%d] = %d,%v want %d", k, got, ok, v)
				}
				if got, f, ok := et.get(k); !ok || got != v || f != uint8(v&7) {
					t.Fatalf("engTable[%d] = %d,%d,%v want %d", k, got, f, ok, v)
				}
			}
			keys := make([]uint64, 0, lookahead)
			for k := range model {
				keys = append(keys, k, k^0xdead)
				if len(keys) >= lookahead {
					break
				}
			}
			var vals [lookahead]uint64
			var oks [lookahead]bool
			um.loadSlots(keys, &vals, &oks)
			for j, k := range keys {
				v, ok := model[k]
				if oks[j] != ok || (ok && vals[j] != v) {
					t.Fatalf("loadSlots[%d] key %d: %d,%v want %d,%v", j, k, vals[j], oks[j], v, ok)
				}
			}
		})
	}
}

// The hot index's inline and bitset forms give the same holders.
func TestHotIndexForms(t *testing.T) {
	x := newHotIndex()
	type h struct {
		slot int32
		t    Tier
	}
	all := []h{{0, TierDevice}, {70, TierHost}, {5, TierDisk}, {130, TierDevice}}
	for n := 1; n <= len(all); n++ {
		for _, e := range all[:n] {
			x.add(42, e.slot, e.t)
		}
		for _, e := range all[:n] {
			if x.add(42, e.slot, e.t) {
				t.Fatalf("%d holders: re-adding %v reported new", n, e)
			}
		}
		for i := n - 1; i >= 0; i-- {
			if !x.remove(42, all[i].slot, all[i].t) {
				t.Fatalf("%d holders: removing %v failed", n, all[i])
			}
			if x.remove(42, all[i].slot, all[i].t) {
				t.Fatalf("%d holders: removing %v twice succeeded", n, all[i])
			}
		}
		if x.m.len() != 0 || x.sets != 0 {
			t.Fatalf("%d holders: %d hashes and %d sets left", n, x.m.len(), x.sets)
		}
	}
}
