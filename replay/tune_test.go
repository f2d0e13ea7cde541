package replay_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/internal/testsize"
	"github.com/pdrouter/pdrouter/replay"
)

// TestTuneHitsTarget: the recommended thresholds give the requested local
// share within ±2 % on the window they came from, and an independent
// what-if pass under the recommended config agrees with the share tune
// reports.
func TestTuneHitsTarget(t *testing.T) {
	recs := records(generate(t, 2000, 4, islConfig()))
	for _, target := range []float64{0.15, 0.3, 0.5}[:testsize.Cases(3, 1)] {
		rep, err := replay.Tune(context.Background(), sliceSource(recs), replay.TuneOptions{TargetLocal: target})
		if err != nil {
			t.Fatal(err)
		}
		r := rep.Recommended
		if r == nil || math.Abs(r.LocalShare-target) > 0.02 {
			t.Fatalf("target %.2f: recommended %+v", target, r)
		}
		// Every candidate's printed config, applied as it is printed, gives
		// the share tune reports for it.
		for _, c := range rep.Candidates {
			wi, err := replay.WhatIf(context.Background(), sliceSource(recs), replay.WhatIfOptions{Disagg: []byte(c.Config)})
			if err != nil {
				t.Fatal(err)
			}
			if wi.LocalShareAfter != c.LocalShare {
				t.Fatalf("target %.2f, %s: tune says %.4f, what-if under %s gives %.4f", target, c.Name, c.LocalShare, c.Config, wi.LocalShareAfter)
			}
		}
		if rep.EffectiveISL.Count != 2000 || rep.EffectiveISL.Percentiles["p25"] > rep.EffectiveISL.Percentiles["p75"] {
			t.Fatalf("distribution: %+v", rep.EffectiveISL)
		}
		t.Logf("target %.2f: %s → %.4f (p25 eff ISL %.0f, p50 ratio %.3f)", target, r.Config, r.LocalShare,
			rep.EffectiveISL.Percentiles["p25"], rep.Ratio.Percentiles["p50"])
	}
	// A target above what the rules allow is reported as out of reach,
	// with the reason, and the closest candidate is still recommended.
	rep, err := replay.Tune(context.Background(), sliceSource(recs), replay.TuneOptions{TargetLocal: 0.95})
	if err != nil {
		t.Fatal(err)
	}
	if rep.MaxLocalShare >= 0.9 || len(rep.Notes) == 0 || !strings.Contains(rep.Notes[len(rep.Notes)-1], "out of reach") ||
		rep.Recommended.LocalShare != rep.MaxLocalShare {
		t.Fatalf("unreachable target: max %.4f, notes %q, recommended %+v", rep.MaxLocalShare, rep.Notes, rep.Recommended)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Logf("target 0.95: out of reach, at most %.4f\n%s", rep.MaxLocalShare, text.String())
}
