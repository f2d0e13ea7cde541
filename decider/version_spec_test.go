package decider_test

import (
	"os"
	"path/filepath"
	"testing"
)

// TestVersion5RecomputesWithTheBacklogCharge: spec.txt's
// backlog_charge_only_where_local_itl_meets, recorded by decider version 5, recomputes
// as that version decided it, with the backlog charge although local's ITL misses.
// It is here, not in spec.txt, because the rules before version 6 decide it the same.
func TestVersion5RecomputesWithTheBacklogCharge(t *testing.T) {
	const c = `case slo/version_5_records_recompute_with_the_backlog_charge
config version=5
disagg {"policy":"slo","slo_min_samples":10}
worker d1 pool=decode
worker p1 pool=prefill
request prompt=1000
active d1 recent=10
active p1 recent=60 prefill_tokens=13000
fit local ttft samples=10 c=3000
fit local itl samples=10 c=60
fit remote ttft samples=10 mean=1000 c=300,0.5
fit remote itl samples=10 c=10
expect slo.remote_delay_charge=1 mode=local reason=slo_local_predicted_better
`
	path := filepath.Join(t.TempDir(), "v5.txt")
	if err := os.WriteFile(path, []byte(c), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := parseSpecFile(t, path)
	if len(cases) != 1 {
		t.Fatalf("%d cases; want 1", len(cases))
	}
	runSpecCase(t, cases[0])
}
