package statestore

import (
	"math/rand/v2"
	"testing"
)

// The engine hash table agrees with a Go map under random puts and
// deletes, including small sequential keys (clustered probes).
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
			for i := 0; i < 50_000; i++ {
				k := tc.key(r)
				if r.IntN(3) == 0 {
					delete(model, k)
					if k != 0 {
						et.del(k)
					}
				} else {
					v := r.Uint64()
					model[k] = v
					et.put(k, v, uint8(v&7))
				}
			}
			for k, v := range model {
				if got, f, ok := et.get(k); !ok || got != v || f != uint8(v&7) {
					t.Fatalf("engTable[%d] = %d,%d,%v want %d", k, got, f, ok, v)
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
			x.add(42, e.slot, e.t, 42)
		}
		for _, e := range all[:n] {
			if x.add(42, e.slot, e.t, 42) {
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

// hotTable agrees with a map through inserts, deletes (which free arena
// positions for reuse) and relayouts; a position confirms a hash (at)
// exactly when it is that hash's entry, so the walk's predictions can
// never pick up a freed or foreign entry; relayout puts a chain in order.
func TestHotTableAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var m hotTable
	type ent struct{ v, up uint64 }
	model := map[uint64]ent{}
	keys := make([]uint64, 0, 4096)
	for i := 0; i < 4096; i++ {
		// Small keys collide in fingerprints (high bits 0), large ones in
		// home slots: both probe paths are exercised.
		if i%2 == 0 {
			keys = append(keys, uint64(i))
		} else {
			keys = append(keys, rng.Uint64())
		}
	}
	check := func(step int) {
		if m.len() != len(model) {
			t.Fatalf("step %d: len %d, model %d", step, m.len(), len(model))
		}
		for _, k := range keys {
			p := m.find(k)
			e, ok := model[k]
			if (p != noPos) != ok || (ok && (m.ents[p].v != e.v || m.ents[p].up != e.up)) {
				t.Fatalf("step %d key %d: pos %d, model %+v %v", step, k, p, e, ok)
			}
			for q := range m.ents {
				if _, hit := m.at(q, k); hit != (q == p) {
					t.Fatalf("step %d key %d: at(%d) = %v, entry at %d", step, k, q, hit, p)
				}
			}
		}
		var pos [lookahead]int32
		for b := 0; b+lookahead <= len(keys); b += lookahead {
			m.resolve(keys[b:b+lookahead], &pos)
			for j, k := range keys[b : b+lookahead] {
				if int(pos[j]) != m.find(k) {
					t.Fatalf("step %d: resolve(%d) = %d, find %d", step, k, pos[j], m.find(k))
				}
			}
		}
	}
	for step := 0; step < 6000; step++ {
		k := keys[rng.IntN(len(keys))]
		if p := m.find(k); p != noPos {
			m.del(k, p)
			delete(model, k)
		} else {
			e := ent{v: rng.Uint64() | 1, up: keys[rng.IntN(len(keys))]}
			m.insert(k, e.v, e.up)
			model[k] = e
		}
		if step%1500 == 1499 {
			m.relayout()
		}
		if step%500 == 0 {
			check(step)
		}
	}
	check(-1)

	// A chain inserted in random order comes out of relayout in order.
	var c hotTable
	chain := make([]uint64, 300)
	for i := range chain {
		chain[i] = rng.Uint64()
	}
	for _, i := range rng.Perm(len(chain)) {
		up := chain[i]
		if i > 0 {
			up = chain[i-1]
		}
		c.insert(chain[i], 1, up)
	}
	c.relayout()
	for i, h := range chain {
		if p := c.find(h); p != i {
			t.Fatalf("after relayout block %d is at %d", i, p)
		}
	}

	// Two chains stored interleaved, three blocks per event: each run's
	// last block links (nx) to where its chain went on.
	var il hotTable
	a, b := chain[:30], chain[30:60]
	for r := 0; r < 30; r += 3 {
		for _, ch := range [][]uint64{a, b} {
			for i := r; i < r+3; i++ {
				up := ch[i]
				if i > 0 {
					up = ch[i-1]
				}
				il.insert(ch[i], 1, up)
			}
		}
	}
	for _, ch := range [][]uint64{a, b} {
		for i := 2; i+1 < len(ch); i += 3 {
			if got, want := il.next(il.find(ch[i])), il.find(ch[i+1]); got != want {
				t.Fatalf("run end %d links to %d, chain goes on at %d", i, got, want)
			}
		}
	}
}
