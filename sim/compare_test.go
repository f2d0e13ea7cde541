package sim

import (
	"bytes"
	"context"
	"os"
	"testing"
)

// realTraceEnv names an optional path to the published Mooncake synthetic trace
// (kvcache-ai/Mooncake, FAST25-release/traces/synthetic_trace.jsonl). The repository
// does not ship it; the tests that were written against it run only when it is given.
const realTraceEnv = "PDR_MOONCAKE_TRACE"

func loadSample(t testing.TB) *Workload {
	t.Helper()
	w, err := LoadMooncake(mooncakeSample)
	if err != nil {
		t.Fatalf("Mooncake sample: %v", err)
	}
	return w
}

// loadRealTrace loads the trace named by realTraceEnv, or skips when it is not set.
func loadRealTrace(t testing.TB) *Workload {
	t.Helper()
	path := os.Getenv(realTraceEnv)
	if path == "" {
		t.Skipf("set %s to the path of Mooncake's FAST25-release/traces/synthetic_trace.jsonl to run this test", realTraceEnv)
	}
	w, err := LoadMooncake(path)
	if err != nil {
		t.Fatalf("%s: %v", realTraceEnv, err)
	}
	return w
}

// TestComparePoliciesMooncake runs every policy on the sample trace and reports the
// figures.
func TestComparePoliciesMooncake(t *testing.T) {
	checkComparePolicies(t, loadSample(t))
}

// TestComparePoliciesMooncakeRealTrace is the same comparison on the first 400
// requests of the published trace.
func TestComparePoliciesMooncakeRealTrace(t *testing.T) {
	checkComparePolicies(t, loadRealTrace(t).Head(400))
}

// checkComparePolicies asserts only what must hold whatever the model's constants:
// always-local and aggregated never prefill remotely, always-remote never locally,
// every request completes, and the conditional policy prefills fewer tokens on the
// prefill pool than always-remote.
func checkComparePolicies(t *testing.T, w *Workload) {
	t.Helper()
	reps, err := Compare(context.Background(), DefaultFleet(), w, Policies(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	FormatTable(&b, reps)
	t.Logf("%s, %d requests, 2P2D:\n%s", w.Name, len(w.Requests), b.String())
	by := map[string]*Report{}
	for _, r := range reps {
		by[r.Label] = r
		if r.Completed != len(w.Requests) {
			t.Errorf("%s: %d of %d completed", r.Label, r.Completed, len(w.Requests))
		}
	}
	for _, name := range []string{"aggregated", "always-local"} {
		if r := by[name]; r.Remote != 0 || r.PrefillComputedOnPrefill != 0 {
			t.Errorf("%s: %d remote, %d tokens on prefill workers", name, r.Remote, r.PrefillComputedOnPrefill)
		}
	}
	if r := by["always-remote"]; r.Local != 0 || r.PrefillComputedOnDecode != 0 {
		t.Errorf("always-remote: %d local, %d tokens prefilled on decode workers", r.Local, r.PrefillComputedOnDecode)
	}
	if c, a := by["cond-isl_bounding"], by["always-remote"]; c.Local == 0 || c.PrefillComputedOnPrefill >= a.PrefillComputedOnPrefill {
		t.Errorf("cond-isl_bounding: %d local, %d tokens on prefill workers vs always-remote %d", c.Local, c.PrefillComputedOnPrefill, a.PrefillComputedOnPrefill)
	}
}
