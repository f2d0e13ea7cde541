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
	runSpecText(t, b.String(), 2)
}

// TestVersion7ColdSampleGuardOnlyAtASoleDecodeWorker: spec.txt's
// cold_start_sole_decode_worker_guard_at_its_load_sample, changed one line at a time,
// keeps the router's count and its denial: a second decode worker, a load sample past
// the guard, no load sample, a configured decode_busy_source, and a record of version 6.
// They are here, not in spec.txt, because version 6 decides them the same.
func TestVersion7ColdSampleGuardOnlyAtASoleDecodeWorker(t *testing.T) {
	var b strings.Builder
	for _, c := range []struct{ name, config, disagg, d2, load string }{
		{"two_decode_workers", "", "", "worker d2 pool=decode total_kv=1000\nactive d2 decode_blocks=990", "load d1 kv_used=100"},
		{"sample_past_the_guard", "", "", "", "load d1 kv_used=600"},
		{"no_load_sample", "", "", "", ""},
		{"configured_source_max", "", `,"decode_busy_source":"max"`, "", "load d1 kv_used=100"},
		{"version_6_record", "config version=6", "", "", "load d1 kv_used=100"},
	} {
		fmt.Fprintf(&b, "case slo/version_7_cold_guard_keeps_the_router_count_%s\n%s\n"+
			"disagg {\"policy\":\"slo\"%s}\nworker d1 pool=decode total_kv=1000\n%s\n"+
			"worker p1 pool=prefill\nworker p2 pool=prefill\nrequest prompt=100\ncache d1 device=5\n"+
			"active d1 decode_blocks=950\n%s\n"+
			"expect mode=remote reason=slo_cold_start_remote decode=d1 decided_by=decode_busy_threshold check.decode_busy.hit=true\n\n",
			c.name, c.config, c.disagg, c.d2, c.load)
	}
	runSpecText(t, b.String(), 5)
}

// TestVersion8SoleDecodeBusyFallbackOnlyAtASoleDecodeWorker: spec.txt's
// cold_start_sole_decode_worker_prefill_busy_fallback_at_3 keeps a threshold of 2 ×
// max_num_batched_tokens, and its local prefill, with a second decode worker, in a
// record of version 7, and with prefill_busy_threshold configured at 2. They are here,
// not in spec.txt, because version 7 decides them the same.
func TestVersion8SoleDecodeBusyFallbackOnlyAtASoleDecodeWorker(t *testing.T) {
	var b strings.Builder
	for _, c := range []struct{ name, config, disagg, d2 string }{
		{"two_decode_workers", "", "", "worker d2 pool=decode total_kv=1000"},
		{"version_7_record", "config version=7", "", ""},
		{"configured_threshold", "", `,"prefill_busy_threshold":2`, ""},
	} {
		fmt.Fprintf(&b, "case slo/version_8_cold_start_keeps_the_threshold_of_2_%s\n%s\n"+
			"disagg {\"policy\":\"slo\"%s}\nworker d1 pool=decode total_kv=1000\n%s\n"+
			"worker p1 pool=prefill mnbt=1000\nrequest prompt=1000\nload p1 prefill_tokens=2500\n"+
			"expect mode=local reason=slo_cold_start_local check.prefill_busy.limit=2000 check.prefill_busy.hit=true\n\n",
			c.name, c.config, c.disagg, c.d2)
	}
	runSpecText(t, b.String(), 3)
}

// runSpecText runs the spec cases of text, which must hold want of them.
func runSpecText(t *testing.T, text string, want int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spec.txt")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := parseSpecFile(t, path)
	if len(cases) != want {
		t.Fatalf("%d cases; want %d", len(cases), want)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runSpecCase(t, c) })
	}
}
