package main

import (
	"os"
	"path/filepath"
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

// TestSimCompareLoadSweepAndSLOSets: --load-scale with a list prints a table per
// level and goodput against load per SLO set, whose figures are the per-level
// tables' goodput column; --chart-load draws it; --slo adds the per-set table; bad
// lists are refused; one level and one set print no extra table.
func TestSimCompareLoadSweepAndSLOSets(t *testing.T) {
	chart := filepath.Join(t.TempDir(), "load.svg")
	out, stderr, err := run(t, nil, "sim", "compare", "--trace", sampleTrace, "--max-requests", "30", "--load-scale", "2,1",
		"--slo", "2000/50,500/20", "--chart-load", chart, "--log-level", "error")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range []string{"30 requests, 2P2D, load ×1,", "30 requests, 2P2D, load ×2,", "goodput% (SLO 2000/50) at load",
		"goodput% (SLO 500/20) at load", "goodput% under SLO (TTFT ms/ITL ms)  2000/50  500/20", "wrote " + chart} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The load table's row of a policy is the goodput% column of each level's table.
	goodputCol := func(header, policy string) string {
		sec := out[strings.Index(out, header):]
		for _, l := range strings.Split(sec, "\n") {
			if f := strings.Fields(l); len(f) > 8 && f[0] == policy {
				return f[len(f)-5] // goodput% is the 5th field from the end
			}
		}
		t.Fatalf("no row %s after %q", policy, header)
		return ""
	}
	for _, l := range strings.Split(out[strings.Index(out, "goodput% (SLO 2000/50) at load"):], "\n")[1:8] {
		f := strings.Fields(l)
		if a, b := goodputCol("load ×1,", f[0]), goodputCol("load ×2,", f[0]); f[1] != a || f[2] != b {
			t.Errorf("%s: load table %v, level tables %s %s", f[0], f[1:], a, b)
		}
	}
	svg, err := os.ReadFile(chart)
	if err != nil || !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "cond-slo") || !strings.Contains(string(svg), "2P2D, SLO 500/20 ms") {
		t.Fatalf("chart: %v\n%.300s", err, svg)
	}
	single, _, err := run(t, nil, "sim", "compare", "--trace", sampleTrace, "--max-requests", "30", "--log-level", "error")
	if err != nil || strings.Contains(single, "goodput% under SLO") || strings.Contains(single, "at load") {
		t.Fatalf("single run: %v\n%s", err, single)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--load-scale", "1,1"}, "--load-scale 1 appears twice"},
		{[]string{"--load-scale", "1,200"}, "--load-scale 200: must be in (0, 100]"},
		{[]string{"--load-scale", "1,2", "--out", t.TempDir()}, "--out with --shapes or several --load-scale levels"},
		{[]string{"--slo", "2000/50", "--slo-itl", "10ms"}, "--slo and --slo-ttft/--slo-itl"},
		{[]string{"--slo", "fast"}, `--slo: "fast" is not a set like 2000/50`},
	} {
		_, _, err := run(t, nil, append([]string{"sim", "compare", "--trace", sampleTrace, "--max-requests", "5"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v; want %q", tc.args, err, tc.want)
		}
	}
}

// TestPolicySLOFollowsTheUsersSLO: in sim, sim compare and plan, cond-slo decides
// with the runs' own SLO (the first --slo set) unless --policy-slo names another,
// the output says which, and a plan's recommended router config carries it.
func TestPolicySLOFollowsTheUsersSLO(t *testing.T) {
	base := []string{"--trace", sampleTrace, "--max-requests", "30", "--log-level", "error"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"sim", "compare", "--slo", "1000/25,2000/50"}, []string{"policy SLO: cond-slo decides with TTFT ≤ 1s and ITL ≤ 25ms"}},
		{[]string{"sim", "compare", "--slo-ttft", "1.5s", "--slo-itl", "30ms"}, []string{"policy SLO: cond-slo decides with TTFT ≤ 1.5s and ITL ≤ 30ms"}},
		{[]string{"sim", "compare", "--slo", "1000/25", "--policy-slo", "2000/50"}, []string{"policy SLO: cond-slo decides with TTFT ≤ 2s and ITL ≤ 50ms"}},
		{[]string{"sim", "compare", "--slo", "1000/25", "--load-scale", "1,2"}, []string{"policy SLO: cond-slo decides with TTFT ≤ 1s and ITL ≤ 25ms"}},
		{[]string{"sim", "--policy", "cond-slo", "--policy-slo", "800/20"}, []string{"the policy decided with TTFT ≤ 800ms and ITL ≤ 20ms"}},
		{[]string{"plan", "--gpus", "3", "--shapes", "1P2D", "--policies", "cond-slo", "--slo", "1000/25"},
			[]string{"policy SLO: cond-slo decides with TTFT ≤ 1s and ITL ≤ 25ms", `"slo_ttft_ms":1000`, `"slo_itl_ms":25`}},
	} {
		out, stderr, err := run(t, nil, append(tc.args, base...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
	for _, cmd := range [][]string{{"sim", "compare"}, {"sim"}, {"plan"}} {
		_, _, err := run(t, nil, append(append(cmd, base...), "--policy-slo", "tight")...)
		if err == nil || !strings.Contains(err.Error(), `--policy-slo: "tight" is not a set like 2000/50`) {
			t.Errorf("%v --policy-slo tight: err %v", cmd, err)
		}
	}
}

// TestSimReplicaFlags: --replicas and --replica-lag are bounded, name the flag in the
// error, are refused with a live router, leave a one-replica run as it was byte for
// byte, and print the replicas and their races in sim's report and sim compare's
// header and table.
func TestSimReplicaFlags(t *testing.T) {
	base := []string{"--trace", sampleTrace, "--max-requests", "40", "--log-level", "error"}
	for _, cmd := range [][]string{{"sim"}, {"sim", "compare"}} {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--replicas", "0"}, "--replicas 0: want 1 to 64 router replicas"},
			{[]string{"--replicas", "65"}, "--replicas 65: want 1 to 64 router replicas"},
			{[]string{"--replica-lag", "-1ms"}, "--replica-lag -1ms: want 0 to 10s of simulated time"},
			{[]string{"--replicas", "2", "--replica-lag", "10001ms"}, "--replica-lag 10.001s: want 0 to 10s of simulated time"},
			{[]string{"--replicas", "two"}, `invalid argument "two" for "--replicas"`},
			{[]string{"--replicas", "2", "--replica-lag", "5ms", "--replica-hashes", "257"}, "--replica-hashes 257: want 0 (the whole chain) to 256"},
			{[]string{"--replicas", "2", "--replica-hashes", "32"}, "--replica-hashes 32: needs --replicas above 1 and a --replica-lag above 0"},
			{[]string{"--replicas", "2", "--replica-shares"}, "--replica-shares: needs --replicas above 1 and a --replica-lag above 0"},
			{[]string{"--replicas", "2", "--replica-lag", "5ms", "--replica-shares", "--replica-hashes", "8"}, "--replica-shares with --replica-hashes 8: a snapshot carries no hashes to cut"},
			{[]string{"--replica-models"}, "--replica-models: needs --replicas above 1"},
			{[]string{"--arrival-spread", "-1s"}, "--arrival-spread -1s: must be in [0, 1m0s]"},
			{[]string{"--arrival-spread", "61s"}, "--arrival-spread 1m1s: must be in [0, 1m0s]"},
		} {
			_, _, err := run(t, nil, append(append(slices.Clone(cmd), base...), tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v %v: err %v; want %q", cmd, tc.args, err, tc.want)
			}
		}
	}
	_, _, err := run(t, nil, "sim", "--router", "http://127.0.0.1:1", "--replicas", "2")
	if err == nil || !strings.Contains(err.Error(), "--replicas, --replica-lag, --replica-hashes, --replica-shares and --replica-models: offline runs only") {
		t.Errorf("--router with --replicas: err %v", err)
	}

	one, _, err := run(t, nil, append([]string{"sim", "--policy", "cond-slo"}, base...)...)
	if err != nil {
		t.Fatal(err)
	}
	same, _, err := run(t, nil, append([]string{"sim", "--policy", "cond-slo", "--replicas", "1", "--replica-lag", "100ms"}, base...)...)
	if err != nil || same != one {
		t.Errorf("one replica with a lag: %v\n%s\nwant\n%s", err, same, one)
	}
	if strings.Contains(one, "replicas") {
		t.Errorf("one router's report names replicas:\n%s", one)
	}
	many, _, err := run(t, nil, append([]string{"sim", "--policy", "cond-slo", "--replicas", "8", "--replica-lag", "100ms"}, base...)...)
	if err != nil || !strings.Contains(many, "replicas     8, each seeing the others' decisions and outcomes 100ms late; ") {
		t.Errorf("8 replicas: %v\n%s", err, many)
	}
	cmp, _, err := run(t, map[string]string{"PDR_REPLICAS": "4"}, append([]string{"sim", "compare", "--replica-lag", "20ms"}, base...)...)
	if err != nil || !strings.Contains(cmp, "SLO TTFT ≤ 2s and ITL ≤ 50ms, 4 replicas, 20ms lag (computed in") ||
		!strings.Contains(cmp, "KV moved  races") {
		t.Errorf("compare with 4 replicas (PDR_REPLICAS): %v\n%s", err, cmp)
	}
}
