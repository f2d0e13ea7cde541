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
// They are here, not in spec.txt, because version 6 decides them the same. The ones at a
// sole decode worker are records of version 14: from version 15 the guard spares the
// prompt there (TestVersion15SoleDecodeRules).
func TestVersion7ColdSampleGuardOnlyAtASoleDecodeWorker(t *testing.T) {
	var b strings.Builder
	for _, c := range []struct{ name, config, disagg, d2, load string }{
		{"two_decode_workers", "", "", "worker d2 pool=decode total_kv=1000\nactive d2 decode_blocks=990", "load d1 kv_used=100"},
		{"sample_past_the_guard", "config version=14", "", "", "load d1 kv_used=600"},
		{"no_load_sample", "config version=14", "", "", ""},
		{"configured_source_max", "config version=14", `,"decode_busy_source":"max"`, "", "load d1 kv_used=100"},
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
	runSpecVariants(t, "case slo/version_8_cold_start_keeps_the_threshold_of_2_%s\n%s\n"+
		"disagg {\"policy\":\"slo\"%s}\nworker d1 pool=decode total_kv=1000\n%s\n"+
		"worker p1 pool=prefill mnbt=1000\nrequest prompt=1000\nload p1 prefill_tokens=2500\n"+
		"expect mode=local reason=slo_cold_start_local check.prefill_busy.limit=2000 check.prefill_busy.hit=true\n\n",
		[]any{"two_decode_workers", "", "", "worker d2 pool=decode total_kv=1000"},
		[]any{"version_7_record", "config version=7", "", ""},
		[]any{"configured_threshold", "", `,"prefill_busy_threshold":2`, ""})
}

// TestVersion9ITLGuardStandsAsideOnlyBehindABacklogAtSeveralDecodeWorkers: spec.txt's
// backlog_itl_guard_stands_aside_at_several_decode_workers keeps the guard's veto with
// one decode worker, with p1 not backlogged, and in a record of version 8. They are
// here, not in spec.txt, because version 8 decides them the same.
func TestVersion9ITLGuardStandsAsideOnlyBehindABacklogAtSeveralDecodeWorkers(t *testing.T) {
	const d2 = "worker d2 pool=decode\nactive d2 requests=2 decode_blocks=30"
	runSpecVariants(t, "case slo/version_9_itl_guard_vetoes_%s\n%s\n"+
		"disagg {\"policy\":\"slo\",\"slo_min_samples\":10}\nworker d1 pool=decode\n%s\nworker p1 pool=prefill\n"+
		"request prompt=1000\nactive d1 requests=2 decode_blocks=30\nactive p1 prefill_tokens=%d\n"+
		"fit local ttft samples=10 c=100,1\nfit local itl samples=10 c=10\n"+
		"fit remote ttft samples=10 c=300,0.5\nfit remote itl samples=10 sigma=1000 c=10,0,0,0,0,0,0.05\n"+
		"expect mode=remote reason=slo_local_denied_itl_guard decided_by=slo_itl_guard distance=10\n\n",
		[]any{"one_decode_worker", "", "", 5000},
		[]any{"no_backlog", "", d2, 0},
		[]any{"version_8_record", "config version=8", d2, 5000})
}

// TestVersion10ColdSampleGuardOnlyBehindADeepBacklog: spec.txt's
// cold_start_guard_at_the_load_sample_behind_a_deep_backlog keeps the router's count and
// its denial with p1's queue at 8 × its max_num_batched_tokens (not past it), with its
// max_num_batched_tokens unknown, and in a record of version 9. They are here, not in
// spec.txt, because version 9 decides them the same.
func TestVersion10ColdSampleGuardOnlyBehindADeepBacklog(t *testing.T) {
	runSpecVariants(t, "case slo/version_10_cold_guard_keeps_the_router_count_%s\n%s\n"+
		"disagg {\"policy\":\"slo\"}\nworker d1 pool=decode total_kv=1000\nworker d2 pool=decode total_kv=1000\n"+
		"worker p1 pool=prefill%s\nrequest prompt=100\ncache d1 device=5\n"+
		"active d1 decode_blocks=950\nactive d2 decode_blocks=990\nload d1 kv_used=100\nload p1 prefill_tokens=%d\n"+
		"expect mode=remote reason=slo_cold_start_remote decode=d1 decided_by=decode_busy_threshold check.decode_busy.hit=true\n\n",
		[]any{"queue_at_8_times", "", " mnbt=1000", 8000},
		[]any{"mnbt_unknown", "", "", 8001},
		[]any{"version_9_record", "config version=9", " mnbt=1000", 8001})
}

// TestVersion11TriageOnlyForALongPromptBehindADoomedQueue: spec.txt's
// both_miss_behind_a_doomed_queue_sends_a_long_prompt_remote keeps local for a prompt the
// ISL condition keeps local (2,000 of 3,000 tokens cached), with remote at 20 × the SLO
// (not past it), with remote at 22.5 × the SLO all of which is the prompt's own prefill
// (15 ms a token: no wait ahead, and more than half of it), and in a record of version
// 10. They are here, not in
// spec.txt, because version 10 decides them the same.
func TestVersion11TriageOnlyForALongPromptBehindADoomedQueue(t *testing.T) {
	const format = `case slo/version_11_triage_keeps_local_%s
%s
disagg {"policy":"slo","slo_min_samples":10}
worker d1 pool=decode
worker d2 pool=decode
worker p1 pool=prefill
request prompt=3000
%s
fit local ttft samples=10 c=3000
fit local itl samples=10 c=10
fit remote ttft samples=10 c=%s
fit remote itl samples=10 c=10
expect mode=local reason=slo_local_predicted_better decided_by=slo_goodput

`
	runSpecVariants(t, format,
		[]any{"short_prompt", "", "cache d1 device=125", "50000"},
		[]any{"remote_at_20_times", "", "", "40000"},
		[]any{"remote_mostly_its_own_prefill", "", "", "0,15"},
		[]any{"version_10_record", "config version=10", "", "50000"})
}

// TestVersion12SoleDecodeISLOnlyWhereTheGoodputDoesNotChoose: spec.txt's
// sole_decode_worker_* cases keep version 11's decision at a sole decode worker for a
// long prompt within the tie margin (remote, as ties go), for a short prompt the
// margin sends remote by more than SLOTieMargin, and in a record of version 11; and at
// two decode workers for a short prompt with both paths predicted to miss. They are
// here, not in spec.txt, because version 11 decides them the same.
func TestVersion12SoleDecodeISLOnlyWhereTheGoodputDoesNotChoose(t *testing.T) {
	const format = `case slo/version_12_keeps_remote_%s
%s
disagg {"policy":"slo","slo_min_samples":10}
worker d1 pool=decode
%s
worker p1 pool=prefill
request prompt=1000
%s
fit local ttft samples=10 c=%s
fit local itl samples=10 c=10
fit remote ttft samples=10 c=%s
fit remote itl samples=10 c=10
expect mode=remote reason=slo_remote_predicted_better decided_by=slo_goodput

`
	runSpecVariants(t, format,
		[]any{"long_prompt_tie", "", "", "", "100", "300"},
		[]any{"short_prompt_remote_better", "", "", "cache d1 device=50", "3000", "300"},
		[]any{"version_11_record", "config version=11", "", "cache d1 device=50", "3000", "4000"},
		[]any{"two_decode_workers", "", "worker d2 pool=decode", "cache d1 device=50", "3000", "4000"})
}

// TestVersion15ColdGuardSparesOnlyAShortPromptAtASoleDecodeWorker: spec.txt's
// cold_start_sole_decode_worker_keeps_a_short_prompt_local_past_the_guard keeps the
// guard's denial in a record of version 14, with a second decode worker, and for a
// prompt only the prefill-busy condition keeps local. They are here, not in spec.txt,
// because version 14 decides them the same.
func TestVersion15ColdGuardSparesOnlyAShortPromptAtASoleDecodeWorker(t *testing.T) {
	const format = `case slo/version_15_cold_guard_denies_%s
%s
disagg {"policy":"slo"}
worker d1 pool=decode total_kv=1000
%s
worker p1 pool=prefill mnbt=1000
request prompt=%s
cache d1 device=5
active d1 decode_blocks=950
load d1 kv_used=600
%s
expect mode=remote reason=slo_cold_start_remote decode=d1 decided_by=decode_busy_threshold check.decode_busy.hit=true

`
	runSpecVariants(t, format,
		[]any{"version_14_record", "config version=14", "", "100", ""},
		[]any{"two_decode_workers", "", "worker d2 pool=decode total_kv=1000\nactive d2 decode_blocks=990", "100", ""},
		[]any{"prompt_kept_local_by_the_prefill_busy_condition", "", "", "1000", "load p1 prefill_tokens=3001"})
}

// TestVersion15ResidenceChargeOnlyAtASoleDecodeWorker: spec.txt's
// sole_decode_worker_charges_the_residence_not_the_next_request keeps the next
// requests' charge, 0 there, and takes local, in a record of version 14 and with a
// second decode worker. They are here, not in spec.txt, because version 14 decides them
// the same.
func TestVersion15ResidenceChargeOnlyAtASoleDecodeWorker(t *testing.T) {
	const format = `case slo/version_15_keeps_the_next_requests_charge_%s
disagg {"policy":"slo","slo_min_samples":10}
%s
worker d1 pool=decode
worker p1 pool=prefill
active d1 requests=4 decode_blocks=40
load d1 kv_used=20
%s
request prompt=1000
fit remote ttft samples=10 mean=1800 c=2100,0.5
fit remote itl samples=10 c=10
fit local ttft samples=10 c=100
fit local itl samples=10 c=10
expect slo.remote_ttft=2600 slo.next_ttft=2600 slo.local_goodput=1 slo.remote_goodput=0 slo.margin=1
expect mode=local reason=slo_local_predicted_better decided_by=slo_goodput

`
	runSpecVariants(t, format,
		[]any{"version_14_record", "config version=14", ""},
		[]any{"two_decode_workers", "", "worker d2 pool=decode\nactive d2 requests=4 decode_blocks=40\nload d2 kv_used=20"})
}

// runSpecVariants runs format, filled with each row's values, as spec cases: every one
// must hold.
func runSpecVariants(t *testing.T, format string, rows ...[]any) {
	t.Helper()
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, format, r...)
	}
	runSpecText(t, b.String(), len(rows))
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

// TestVersion13BacklogPickOnlyBehindADeepBacklogUnderSLO: spec.txt's
// pick_behind_a_deep_backlog_counts_decode_blocks_at_the_load_sample keeps the
// router's count, and the idle worker, in a record of version 12, under another
// policy, on a decode worker with no load sample, with the prefill queue at 8 × its
// max_num_batched_tokens and not past it, with a second prefill worker whose queue is
// short or unknown, and where the sample shows more blocks than the count. They are
// here, not in spec.txt, because version 12 decides them the same.
func TestVersion13BacklogPickOnlyBehindADeepBacklogUnderSLO(t *testing.T) {
	const format = `case select/version_13_keeps_the_count_%s
%s
disagg {"policy":"%s","slo_min_samples":10}
worker d1 pool=decode
worker d2 pool=decode
worker p1 pool=prefill mnbt=100
%s
request prompt=320
cache d1 device=10
active d1 decode_blocks=40
%s
load p1 prefill_tokens=%s
expect decode=d2 cost.d1=1120 cost.d2=640 potential.d1=60

`
	runSpecVariants(t, format,
		[]any{"version_12_record", "config version=12", "slo", "", "load d1 kv_used=5", "1000"},
		[]any{"isl_bounding", "", "isl_bounding", "", "load d1 kv_used=5", "1000"},
		[]any{"no_decode_sample", "", "slo", "", "", "1000"},
		[]any{"queue_at_the_limit", "", "slo", "", "load d1 kv_used=5", "800"},
		[]any{"another_prefill_worker_short", "", "slo", "worker p2 pool=prefill mnbt=100", "load d1 kv_used=5\nload p2 prefill_tokens=0", "1000"},
		[]any{"another_prefill_worker_unknown", "", "slo", "worker p2 pool=prefill mnbt=100", "load d1 kv_used=5", "1000"},
		[]any{"sample_above_the_count", "", "slo", "", "load d1 kv_used=100", "1000"})
}

// TestVersion14ITLSpanOnlyForAPromptPrefilledWithinTheITLSLO: spec.txt's
// prompt_prefilled_within_the_itl_slo_is_not_charged_the_running_requests_itl keeps the
// running requests' ITL charge, and goes remote, in a record of version 13, for a prompt
// one token past the SLO's worth of prefill, and with a remote TTFT fit that gives
// uncached tokens no time. They are here, not in spec.txt, because version 13 decides
// them the same.
func TestVersion14ITLSpanOnlyForAPromptPrefilledWithinTheITLSLO(t *testing.T) {
	const format = `case slo/version_14_keeps_the_charge_%s
%s
disagg {"policy":"slo","slo_min_samples":10,"slo_itl_guard":false}
worker d1 pool=decode
worker p1 pool=prefill
request prompt=%s
active d1 requests=3 decode_blocks=30
active p1 prefill_tokens=5000
load d1 kv_used=30
fit local ttft samples=10 c=100,1
fit local itl samples=10 c=10
fit remote ttft samples=10 c=%s
fit remote itl samples=10 c=10,0,0,0,0,0,0.5
expect slo.others_base_itl=10 slo.local_goodput=-2 slo.remote_goodput=0 slo.margin=-2
expect mode=remote reason=slo_remote_predicted_better

`
	runSpecVariants(t, format,
		[]any{"version_13_record", "config version=13", "100", "300,0.5"},
		[]any{"prefill_past_the_itl_slo", "", "101", "300,0.5"},
		[]any{"fit_without_prefill_time", "", "100", "300,0,0,0.5"})
}

// TestVersion14BacklogChargeLimitOnlyWhereTheChargesDecide: spec.txt's
// backlog_both_miss_by_the_charges_below_a_quarter_request takes the prompt local, its
// charges of 0.3 request under half a request, in a record of version 13; and at version
// 14 with charges of 0.2 request, under a quarter. They are here, not in spec.txt,
// because version 13 decides them the same.
func TestVersion14BacklogChargeLimitOnlyWhereTheChargesDecide(t *testing.T) {
	// Both decode workers took the same recent requests, so the charge is the same
	// whichever the pick takes.
	const format = `case slo/version_14_takes_local_%[1]s
%[2]s
disagg {"policy":"slo","slo_min_samples":10}
worker d1 pool=decode
worker d2 pool=decode
worker p1 pool=prefill
request prompt=1000
active d1 recent=%[3]s
active d2 recent=%[3]s
active p1 recent=60 prefill_tokens=13000
fit local ttft samples=10 c=3000
fit local itl samples=10 c=100
fit remote ttft samples=10 mean=1000 c=300,0.5
fit remote itl samples=10 c=10
expect slo.remote_ttft=7000 slo.remote_goodput=0 slo.local_delay_charge=%[4]s mode=local reason=slo_local_predicted_better

`
	runSpecVariants(t, format,
		[]any{"version_13_record", "config version=13", "3", "0.3"},
		[]any{"charges_under_a_quarter", "", "2", "0.2"})
}
