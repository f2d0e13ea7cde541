package replay_test

import (
	"context"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/replay"
)

// TestWhatIfActiveConfigFlipsNothing: replaying a window under the config
// it was decided with changes no decision.
func TestWhatIfActiveConfigFlipsNothing(t *testing.T) {
	cs := generate(t, 600, 1, islConfig())
	rep, err := replay.WhatIf(context.Background(), sliceSource(records(cs)), replay.WhatIfOptions{
		Disagg: []byte(`{"policy":"isl_bounding","eff_isl_threshold":2048,"eff_isl_ratio_threshold":0.7}`)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Flips != 0 || rep.BaselineMismatches != 0 || rep.Skipped != 0 || rep.LocalBefore != rep.LocalAfter || rep.LocalBefore == 0 || rep.LocalBefore == rep.Decisions {
		t.Fatalf("same config: %+v", rep)
	}
	t.Logf("600 decisions, %d local: 0 flips", rep.LocalBefore)
}

// TestWhatIfThresholdZeroFlipsEveryLocal: with eff_isl_threshold 0 no
// effective ISL passes the absolute check, so every local decision (all have
// a prefill worker and a non-empty prompt) goes remote, and none comes back.
func TestWhatIfThresholdZeroFlipsEveryLocal(t *testing.T) {
	cs := generate(t, 600, 2, islConfig())
	rep, err := replay.WhatIf(context.Background(), sliceSource(records(cs)), replay.WhatIfOptions{Disagg: []byte(`{"eff_isl_threshold":0}`)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.LocalBefore == 0 || rep.LocalToRemote != rep.LocalBefore || rep.RemoteToLocal != 0 || rep.LocalAfter != 0 {
		t.Fatalf("threshold 0: %+v", rep)
	}
	if len(rep.ByReason) != 1 || rep.ByReason[0].From != string(decider.ReasonAllowedGateDisabled) ||
		rep.ByReason[0].To != string(decider.ReasonDeclinedByPolicy) || rep.FlippedEffISL.Count != rep.Flips {
		t.Fatalf("by reason: %+v", rep.ByReason)
	}
	if rep.LoadShift.MovedToDecode != 0 || rep.LoadShift.MovedToPrefill <= 0 ||
		rep.LoadShift.DecodePoolPrefillTokensAfter != 0 {
		t.Fatalf("load shift: %+v", rep.LoadShift)
	}
	t.Logf("threshold 0: %d of %d local decisions flip to remote; %d prefill tokens move to the prefill pool", rep.LocalToRemote, rep.Decisions, rep.LoadShift.MovedToPrefill)
}

// TestWhatIfMatchesDirectRecomputation: under a config with a lower
// threshold, a decode guard and another ratio, the flips, their reasons, the
// local count and the moved prefill tokens equal those of deciding every
// request again on the very state it was decided from.
func TestWhatIfMatchesDirectRecomputation(t *testing.T) {
	cs := generate(t, 800, 3, islConfig())
	alt := `{"eff_isl_threshold":1024,"eff_isl_ratio_threshold":0.5,"decode_busy_threshold":0.5,"decode_busy_source":"max"}`
	rep, err := replay.WhatIf(context.Background(), sliceSource(records(cs)), replay.WhatIfOptions{Disagg: []byte(alt)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := islConfig()
	if cfg.Disagg, err = decider.ParseDisaggConfig([]byte(alt)); err != nil {
		t.Fatal(err)
	}
	dc, err := decider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	local, l2r, r2l := 0, 0, 0
	reasons := map[[2]string]int{}
	for _, c := range cs {
		d, err := dc.Decide(c.View, c.Req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Mode == decider.ModeLocal {
			local++
		}
		if string(d.Mode) != c.Rec.GetMode() {
			if d.Mode == decider.ModeRemote {
				l2r++
			} else {
				r2l++
			}
			reasons[[2]string{c.Rec.GetReason(), string(d.Reason)}]++
		}
	}
	if rep.LocalAfter != local || rep.LocalToRemote != l2r || rep.RemoteToLocal != r2l || rep.Flips != l2r+r2l || l2r == 0 {
		t.Fatalf("what-if %+v; direct: local %d, local→remote %d, remote→local %d", rep, local, l2r, r2l)
	}
	for _, f := range rep.ByReason {
		if reasons[[2]string{f.From, f.To}] != f.Count {
			t.Fatalf("reason %s→%s: what-if %d, direct %d", f.From, f.To, f.Count, reasons[[2]string{f.From, f.To}])
		}
		delete(reasons, [2]string{f.From, f.To})
	}
	if len(reasons) != 0 {
		t.Fatalf("direct flips missing from the report: %v", reasons)
	}
	t.Logf("lower threshold + guard: %d flips (%d local→remote, %d remote→local), as direct recomputation", rep.Flips, l2r, r2l)
}
