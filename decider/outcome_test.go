package decider_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
)

// TestOutcomesAreWhatDecisionsHave: every decision of random fleets and
// configs (the feature on and off, prefill pools empty or not) has an
// outcome Outcomes lists, and every outcome listed is reached, so the list
// is neither short (a series missing at start) nor stale.
func TestOutcomesAreWhatDecisionsHave(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 19))
	seen := map[decider.Outcome]int{}
	for iter := range 3000 {
		f := randomFleet(rng, 1+rng.IntN(6), rng.IntN(4))
		cfg := randomConfig(rng)
		cfg.ConditionalDisagg = rng.IntN(8) != 0
		dc, err := decider.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		d, err := dc.Decide(f.view(nil), &f.req)
		if err != nil {
			continue
		}
		o := decider.Outcome{Mode: d.Mode, Reason: d.Reason}
		if !slices.Contains(decider.Outcomes(), o) {
			t.Fatalf("iter %d: outcome %+v is not in Outcomes()", iter, o)
		}
		seen[o]++
	}
	for _, o := range decider.Outcomes() {
		if seen[o] == 0 {
			t.Errorf("outcome %+v never reached: stale in Outcomes(), or the test's fleets are too narrow", o)
		}
	}
	t.Logf("outcomes reached: %v", seen)
}
