package sim

import (
	"bytes"
	"context"
	"testing"
)

// mooncakeTrace is the synthetic workload shipped in the repository's testdata.
const mooncakeTrace = "../testdata/mooncake/synthetic_trace.jsonl"

func loadTrace(t testing.TB) *Workload {
	t.Helper()
	w, err := LoadMooncake(mooncakeTrace)
	if err != nil {
		t.Fatalf("Mooncake trace: %v", err)
	}
	return w
}

// TestComparePoliciesMooncake runs every policy on a bounded prefix of the Mooncake
// trace and reports the figures. It asserts only what must hold whatever the model's
// constants: always-local and aggregated never prefill remotely, always-remote never
// locally, every request completes, and the conditional policy prefills fewer tokens
// on the prefill pool than always-remote.
func TestComparePoliciesMooncake(t *testing.T) {
	w := loadTrace(t).Head(400)
	reps, err := Compare(context.Background(), DefaultFleet(), w, Policies(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	FormatTable(&b, reps)
	t.Logf("Mooncake synthetic trace, first %d requests, 2P2D:\n%s", len(w.Requests), b.String())
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
