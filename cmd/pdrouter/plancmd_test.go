package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
)

const sampleTrace = "../../testdata/mooncake/sample.jsonl"

// TestPlanFlagsRefused: every flag that cannot make a plan is refused before any run,
// with an error naming the flag.
func TestPlanFlagsRefused(t *testing.T) {
	hostile := filepath.Join(t.TempDir(), "hostile.jsonl")
	if err := os.WriteFile(hostile, []byte(`{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}`+"\n"+
		`{"timestamp": 5, "input_length": 2000000, "output_length": 1, "hash_ids": [2]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--trace: plan needs a Mooncake JSONL trace"},
		{[]string{"--trace", sampleTrace, "--gpus", "1"}, "--gpus 1: a split fleet needs 2 to 64 GPUs"},
		{[]string{"--trace", sampleTrace, "--gpus", "100"}, "--gpus 100"},
		{[]string{"--trace", sampleTrace, "--shapes", "2P6"}, `--shapes: "2P6" is not a shape like 2P6D`},
		{[]string{"--trace", sampleTrace, "--shapes", "2P5D"}, "--shapes: 2P5D is not a split of 8 GPUs"},
		{[]string{"--trace", sampleTrace, "--shapes", "0P8D"}, "0P8D is not a split of 8 GPUs with ≥ 1 prefill"},
		{[]string{"--trace", sampleTrace, "--shapes", "2P6D,2P6D"}, "2P6D appears twice"},
		{[]string{"--trace", sampleTrace, "--slo", "2000"}, `--slo: "2000" is not a set like 2000/50`},
		{[]string{"--trace", sampleTrace, "--slo", "2000/0"}, `--slo: "2000/0" is not a set`},
		{[]string{"--trace", sampleTrace, "--slo", "-1/50"}, `--slo: "-1/50" is not a set`},
		{[]string{"--trace", sampleTrace, "--slo", "2000/50,2000/50"}, "--slo: 2000/50 appears twice"},
		{[]string{"--trace", sampleTrace, "--slo", "1/1,2/2,3/3,4/4,5/5,6/6,7/7,8/8,9/9"}, "--slo: 9 sets; at most 8"},
		{[]string{"--trace", sampleTrace, "--slo", "2000/50", "--slo-ttft", "1s"}, "--slo and --slo-ttft/--slo-itl"},
		{[]string{"--trace", sampleTrace, "--load-scale", "0"}, "--load-scale 0: must be in (0, 100]"},
		{[]string{"--trace", sampleTrace, "--load-scale", "1,1"}, "--load-scale 1 appears twice"},
		{[]string{"--trace", sampleTrace, "--policies", "aggregated"}, "reference row"},
		{[]string{"--trace", sampleTrace, "--policies", "nope"}, `--policies: unknown policy "nope"`},
		{[]string{"--trace", sampleTrace, "--parallel", "-1"}, "--parallel -1"},
		{[]string{"--trace", "/nonexistent/trace.jsonl"}, "no such file"},
		{[]string{"--trace", hostile}, "hostile.jsonl: line 2: input_length 2000000 or output_length 1 is past 1048576 tokens"},
	} {
		_, _, err := run(t, nil, append([]string{"plan"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("plan %v: err %v; want %q", tc.args, err, tc.want)
		}
	}
}

// TestPlanOutputSameWhateverParallel: the table, the JSON and the files are the same
// bytes with --parallel 1 and 2.
func TestPlanOutputSameWhateverParallel(t *testing.T) {
	args := []string{"plan", "--trace", sampleTrace, "--max-requests", "40", "--gpus", "3", "--load-scale", "1,2",
		"--slo", "2000/50,800/30", "--log-level", "error"}
	var outs [2]string
	var dirs [2]string
	for i, par := range []string{"1", "2"} {
		dirs[i] = t.TempDir()
		out, stderr, err := run(t, nil, append(args, "--parallel", par, "--out", dirs[i])...)
		if err != nil {
			t.Fatalf("--parallel %s: %v\n%s", par, err, stderr)
		}
		outs[i] = out
	}
	if outs[0] != outs[1] {
		t.Fatalf("--parallel 1:\n%s\n--parallel 2:\n%s", outs[0], outs[1])
	}
	for _, f := range []string{"plan.txt", "plan.json", "plan.svg"} {
		a, err1 := os.ReadFile(filepath.Join(dirs[0], f))
		b, err2 := os.ReadFile(filepath.Join(dirs[1], f))
		if err1 != nil || err2 != nil || string(a) != string(b) || len(a) == 0 {
			t.Errorf("%s differs or is missing: %v %v", f, err1, err2)
		}
	}
	// Each load runs aggregated serving once, and each of the two shapes under
	// always-local, always-remote and every policy of the decider's table.
	runs := 2 * (1 + 2*(2+len(decider.Policies())))
	for _, want := range []string{fmt.Sprintf("plan: ../../testdata/mooncake/sample.jsonl, 40 requests, 3 GPUs, load ×1 ×2, %d runs", runs),
		"1P2D", "2P1D", "recommended (SLO 2000/50):", "recommended (SLO 800/30):", "aggregated (3D)"} {
		if !strings.Contains(outs[0], want) {
			t.Errorf("output lacks %q:\n%s", want, outs[0])
		}
	}
	js, _, err := run(t, nil, append(args, "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Recommendations []struct{ Shape, Policy string }
		Cells           []json.RawMessage
	}
	if err := json.Unmarshal([]byte(js), &p); err != nil || len(p.Recommendations) != 2 || len(p.Cells) != runs {
		t.Fatalf("--json: %v %+v\n%s", err, p, js)
	}
	if !strings.Contains(outs[0], "recommended (SLO 2000/50): "+p.Recommendations[0].Shape+" with "+p.Recommendations[0].Policy) {
		t.Errorf("the table and the JSON recommend differently")
	}
}
