package decider_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersion5RecomputesWithTheBacklogCharge: spec.txt's
// backlog_charge_only_where_local_itl_meets and
// backlog_both_miss_judged_by_the_charges_where_local_itl_misses, recorded by decider
// version 5, recompute as that version decided them: with the backlog charge although
// local's ITL misses, and by the miss factor. They are here, not in spec.txt, because
// the rules before version 6 decide them the same.
func TestVersion5RecomputesWithTheBacklogCharge(t *testing.T) {
	var b strings.Builder
	for _, c := range []struct {
		name, d1     string
		localITL     int
		mode, reason string
	}{
		{"with_the_backlog_charge", "active d1 recent=10", 60, "local", "slo_local_predicted_better"},
		{"both_miss_by_the_miss_factor", "", 100, "remote", "slo_remote_predicted_better"},
	} {
		fmt.Fprintf(&b, "case slo/version_5_records_recompute_%s\nconfig version=5\n"+
			"disagg {\"policy\":\"slo\",\"slo_min_samples\":10}\nworker d1 pool=decode\nworker p1 pool=prefill\n"+
			"request prompt=1000\n%s\nactive p1 recent=60 prefill_tokens=13000\n"+
			"fit local ttft samples=10 c=3000\nfit local itl samples=10 c=%d\n"+
			"fit remote ttft samples=10 mean=1000 c=300,0.5\nfit remote itl samples=10 c=10\n"+
			"expect slo.remote_delay_charge=1 mode=%s reason=%s\n\n", c.name, c.d1, c.localITL, c.mode, c.reason)
	}
	path := filepath.Join(t.TempDir(), "v5.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := parseSpecFile(t, path)
	if len(cases) != 2 {
		t.Fatalf("%d cases; want 2", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runSpecCase(t, c) })
	}
}
