package latmodel

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestLearnJoined: a model that learns, for every decision id, what
// another joined (Joined, then Learn) holds what that model holds: the
// same sums and fit. The synthetic facts hold outcomes stamped before
// their decisions, duplicates and replaced targets; those ids without an
// outcome teach nothing either way.
func TestLearnJoined(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	facts := synthFacts(rng, 3000, 8*time.Minute, true)
	src := New(Config{})
	ids := map[string]bool{}
	for _, f := range facts {
		f.apply(src)
		ids[f.id] = true
	}
	peer := New(Config{})
	learned := 0
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range ids {
			if !yield(id) {
				return
			}
		}
	}) {
		if j, ok := src.Joined(id); ok {
			peer.Learn(id, &j)
			learned++
		}
	}
	if learned < 2000 {
		t.Fatalf("%d of %d decisions joined", learned, len(ids))
	}
	if a, b := src.AppendSums(nil), peer.AppendSums(nil); !bytes.Equal(a, b) {
		t.Fatalf("sums differ (%d and %d bytes)", len(a), len(b))
	}
	if a, b := src.Fit(), peer.Fit(); *a != *b {
		t.Fatalf("fits differ:\n%+v\n%+v", a, b)
	}
}

// TestJoinedNeedsATarget: a decision without an outcome, and an outcome
// without its decision, are not joined.
func TestJoinedNeedsATarget(t *testing.T) {
	m := New(Config{})
	f := fact{id: "d1", t: int64(time.Minute), decision: true}
	f.apply(m)
	fact{id: "d2", t: int64(time.Minute), ttft: 80, itl: -1}.apply(m)
	for _, id := range []string{"d1", "d2", "d3"} {
		if j, ok := m.Joined(id); ok {
			t.Errorf("%s joined: %+v", id, j)
		}
	}
}

// TestUnitsRoundTrip: every target the model holds survives its trip
// through milliseconds.
func TestUnitsRoundTrip(t *testing.T) {
	for u := int64(0); u <= 1<<20; u++ {
		if got := toUnits(fromUnits(u)); got != u {
			t.Fatalf("%d units → %v ms → %d units", u, fromUnits(u), got)
		}
	}
}
