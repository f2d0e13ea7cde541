package main

import (
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/sim"
)

// TestSimCompareReplaysTheSampleTrace: the trace that --trace's help names is in the
// repository and replays offline under every policy.
func TestSimCompareReplaysTheSampleTrace(t *testing.T) {
	out, stderr, err := run(t, nil, "sim", "compare", "--trace", "../../testdata/mooncake/sample.jsonl")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(out, "sample.jsonl: 300 requests, 2P2D") || !strings.Contains(out, "cond-isl_bounding") {
		t.Errorf("unexpected output:\n%s", out)
	}
}

// TestSimPolicyHelpListsEverySetup: the help of `sim --policy` names every setup of
// sim.Policies, which follows the decider's table.
func TestSimPolicyHelpListsEverySetup(t *testing.T) {
	cmd := newSimCmd(&app{})
	usage := cmd.Flags().Lookup("policy").Usage
	if want := strings.Join(sim.PolicyNames(), ", "); !strings.Contains(usage, want) {
		t.Fatalf("usage %q does not contain %q", usage, want)
	}
}
