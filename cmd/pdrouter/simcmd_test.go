package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
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
// sim.Policies and, with the cond- prefix, every policy of the decider's table. The
// names are read from the tables, not from sim.PolicyNames, which builds the help.
func TestSimPolicyHelpListsEverySetup(t *testing.T) {
	cmd := newSimCmd(&app{})
	usage := cmd.Flags().Lookup("policy").Usage
	listed := strings.Split(strings.TrimPrefix(usage, "offline only: "), ", ")
	var want []string
	for _, p := range sim.Policies() {
		want = append(want, p.Name)
	}
	for _, p := range decider.Policies() {
		want = append(want, sim.CondPrefix+string(p.Name))
	}
	for _, name := range want {
		if !slices.Contains(listed, name) {
			t.Errorf("usage %q does not name %s", usage, name)
		}
	}
}
