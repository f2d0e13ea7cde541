package main

import (
	"strings"
	"testing"
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
