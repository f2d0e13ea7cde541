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

// TestSimCPUTierFlags: the host tier's flags refuse what is not a size or a
// bandwidth, by flag or by environment, name the flag in the error, and are offered
// by sim, sim compare and dev (as --sim-…).
func TestSimCPUTierFlags(t *testing.T) {
	sample := []string{"sim", "--trace", "../../testdata/mooncake/sample.jsonl", "--max-requests", "20"}
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--cpu-kv-gib", "-1"}, nil, "--cpu-kv-gib -1: must be in [0, 4096]"},
		{[]string{"--cpu-kv-gib", "4097"}, nil, "--cpu-kv-gib 4097: must be in [0, 4096]"},
		{[]string{"--cpu-kv-gib", "NaN"}, nil, "--cpu-kv-gib NaN"},
		{[]string{"--cpu-kv-gbps", "0"}, nil, "--cpu-kv-gbps 0: must be in (0, 1000]"},
		{[]string{"--cpu-kv-gbps", "+Inf"}, nil, "--cpu-kv-gbps +Inf"},
		{nil, map[string]string{"PDR_CPU_KV_GIB": "lots"}, "PDR_CPU_KV_GIB"},
		{[]string{"compare", "--cpu-kv-gib", "-2"}, nil, "--cpu-kv-gib -2"},
	} {
		args := append(slices.Clone(sample[:1]), c.args...)
		args = append(args, sample[1:]...)
		if _, _, err := run(t, c.env, args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: err %v, want %q", c.args, c.env, err, c.want)
		}
	}
	if out, stderr, err := run(t, map[string]string{"PDR_CPU_KV_GIB": "1", "PDR_CPU_KV_GBPS": "50"}, sample...); err != nil || !strings.Contains(out, "== cond-") {
		t.Fatalf("a valid tier from the environment: %v\n%s%s", err, out, stderr)
	}
	out, _, err := run(t, nil, "dev", "--help")
	if err != nil || !strings.Contains(out, "--sim-cpu-kv-gib") || !strings.Contains(out, "PDR_SIM_CPU_KV_GBPS") {
		t.Fatalf("dev --help does not offer the tier's flags: %v\n%s", err, out)
	}
}
