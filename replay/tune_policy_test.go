package replay_test

import (
	"context"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/replay"
)

// TestTuneComparesEveryPolicy: tune reports, next to its threshold candidates, the
// local share of every policy of the decider's table at the window's thresholds, each
// recomputed on every decision and agreeing with a what-if pass under its config.
func TestTuneComparesEveryPolicy(t *testing.T) {
	cfg := islConfig()
	cfg.Disagg.Policy = decider.PolicyISLOrLoad
	cfg.Disagg.PrefillBusyThreshold = decider.Some(0.5)
	recs := records(generate(t, 400, 9, cfg))
	rep, err := replay.Tune(context.Background(), sliceSource(recs), replay.TuneOptions{TargetLocal: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	names := decider.PolicyNames()
	if len(rep.Policies) != len(names) {
		t.Fatalf("policies %+v, want one per %v", rep.Policies, names)
	}
	for i, c := range rep.Policies {
		if c.Policy != names[i] || !strings.Contains(c.Config, `"policy":"`+names[i]+`"`) {
			t.Fatalf("policy row %d: %+v, want policy %s", i, c, names[i])
		}
		wi, err := replay.WhatIf(context.Background(), sliceSource(recs), replay.WhatIfOptions{Disagg: []byte(c.Config)})
		if err != nil {
			t.Fatal(err)
		}
		if wi.LocalShareAfter != c.LocalShare {
			t.Fatalf("%s: tune says %.4f, what-if under %s gives %.4f", c.Policy, c.LocalShare, c.Config, wi.LocalShareAfter)
		}
		t.Logf("%-14s %.4f  %s", c.Policy, c.LocalShare, c.Config)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.Contains(text.String(), `"policy":"`+n+`"`) {
			t.Fatalf("the text report leaves policy %s out:\n%s", n, text.String())
		}
	}
}

// TestTuneMovesThresholdsOfAPolicyThatReadsThem: a window whose policy reads no ISL
// threshold is tuned under the first policy of the table that reads them and every key
// the window's policy reads, and the report says so.
func TestTuneMovesThresholdsOfAPolicyThatReadsThem(t *testing.T) {
	cfg := islConfig()
	cfg.Disagg.Policy = decider.PolicyPrefillLoad
	cfg.Disagg.PrefillBusyThreshold = decider.Some(0.5)
	recs := records(generate(t, 200, 3, cfg))
	rep, err := replay.Tune(context.Background(), sliceSource(recs), replay.TuneOptions{TargetLocal: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Base, `"policy":"isl_or_load"`) || len(rep.Notes) == 0 ||
		rep.Notes[0] != "the window's policy is prefill_load, which reads no ISL threshold; candidates use isl_or_load" {
		t.Fatalf("base %s, notes %q", rep.Base, rep.Notes)
	}
}
