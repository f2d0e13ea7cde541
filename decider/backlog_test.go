package decider

import (
	"math"
	"testing"
)

// TestBacklogSurvivesHostileRows: the prefill row's queued tokens and recent requests
// come from the log, so any int64 can be in them. A queue whose sum with this prompt
// would overflow is the longest there is and backlogged; a negative count is none.
// At exactly slo_ttft_ms of prefill time the worker is not backlogged.
func TestBacklogSurvivesHostileRows(t *testing.T) {
	cfg := DefaultConfig().Disagg // slo_ttft_ms 2000
	var fit LatencyFit
	fit.Coef[PathRemote][TargetTTFT][1] = 0.5
	for _, tc := range []struct {
		queued, uncached, recent int64
		backlogged               bool
	}{
		{0, 1000, 30, false},
		{3000, 1000, 30, false}, // 2000 ms: at the SLO
		{3001, 1000, 30, true},  // past it
		{math.MaxInt64, 1000, 30, true},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64, true},
		{math.MinInt64, 1000, 30, false},
		{math.MaxInt64, 1000, math.MinInt64, true},
	} {
		in := LatencyInputs{Queued: tc.queued, Uncached: tc.uncached}
		floor, charge, backlogged := sloBacklog(&cfg, &fit, &Candidate{RecentRequests: tc.recent}, &in, 100)
		bad := math.IsNaN(floor) || math.IsInf(floor, 0) || floor < 100 || math.IsNaN(charge) || charge < 0
		if backlogged != tc.backlogged || bad || (!backlogged && (floor != 100 || charge != 0)) {
			t.Errorf("queued %d, uncached %d, recent %d: floor %v, charge %v, backlogged %v; want backlogged %v",
				tc.queued, tc.uncached, tc.recent, floor, charge, backlogged, tc.backlogged)
		}
	}
	// The per-token time is the larger remote TTFT coefficient of uncached and queued
	// tokens: a fit that puts a backlog's wait on the queue still sees it.
	fit.Coef[PathRemote][TargetTTFT][1], fit.Coef[PathRemote][TargetTTFT][3] = -0.1, 0.5
	if _, _, b := sloBacklog(&cfg, &fit, &Candidate{}, &LatencyInputs{Queued: 5000}, 0); !b {
		t.Error("a queued-token coefficient of 0.5 ms and 5000 queued tokens: want backlogged")
	}
	fit.Coef[PathRemote][TargetTTFT][3] = -0.5
	if _, _, b := sloBacklog(&cfg, &fit, &Candidate{}, &LatencyInputs{Queued: math.MaxInt64}, 0); b {
		t.Error("no positive per-token coefficient: want no backlog")
	}
}

// TestResidentShare: the share is bounded to [0, 1] whatever the load sample and the
// router's count say, and is 1 when either is missing.
func TestResidentShare(t *testing.T) {
	for _, tc := range []struct {
		known        bool
		used, active int64
		want         float64
	}{
		{false, 0, 30, 1},
		{true, 10, 0, 1},
		{true, 10, -5, 1},
		{true, 10, 30, 1.0 / 3},
		{true, 90, 30, 1},
		{true, -10, 30, 0},
		{true, math.MaxInt64, 1, 1},
		{true, math.MinInt64, math.MaxInt64, 0},
	} {
		d := Candidate{LoadKnown: tc.known, LoadKVUsedBlocks: tc.used, ActiveDecodeBlocks: tc.active}
		if got := residentShare(&d); got != tc.want {
			t.Errorf("known %v, used %d, active %d: %v; want %v", tc.known, tc.used, tc.active, got, tc.want)
		}
	}
}

// TestBacklogChargeOnlyWhereLocalITLMeets: the backlog charge counts up to and at
// slo_itl_ms of local predicted ITL, not past it, and not for a prediction that is
// not a number.
func TestBacklogChargeOnlyWhereLocalITLMeets(t *testing.T) {
	cfg := DefaultConfig().Disagg // slo_itl_ms 50
	for _, tc := range []struct {
		itl  float64
		want bool
	}{
		{0, true}, {49.9, true}, {50, true}, {50.1, false}, {math.Inf(1), false}, {math.NaN(), false},
	} {
		if got := sloBacklogCharge(&cfg, &SLOPrediction{LocalITLMs: tc.itl}); got != tc.want {
			t.Errorf("local ITL %v ms: charge counts %v; want %v", tc.itl, got, tc.want)
		}
	}
}

// TestSLOSemanticsByVersion: a record recomputes with the slo policy's rules of the
// decider version it was decided by: the backlog from version 5, its charge bound by
// local's ITL from version 6, the cold start's guard at a sole decode worker's load
// sample from version 7, its fallback prefill busy threshold at a sole decode worker
// from version 8, the ITL guard standing aside behind a backlog at several decode
// workers from version 9, the cold start's guard at the load sample behind a deep
// backlog from version 10, the overload triage from version 11, the ISL condition at a
// sole decode worker where the goodput does not choose from version 12, the pick's
// decode term at the load sample behind a deep backlog from version 13 (and only under
// the slo policy), no running requests' ITL charge for a prompt whose prefill takes at
// most slo_itl_ms and a both-miss behind a backlog judged by the charges at
// SLOBacklogMissChargeLimit from version 14.
func TestSLOSemanticsByVersion(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Disagg.Policy = PolicySLO
	for v := uint32(1); v <= Version; v++ {
		dc, err := NewAt(cfg, v)
		if err != nil {
			t.Fatal(err)
		}
		if dc.backlog != (v >= 5) || dc.itlBoundCharge != (v >= 6) || dc.coldSoleDecode != (v >= 7) || dc.coldSoleBusy != (v >= 8) ||
			dc.backlogITLGuard != (v >= 9) || dc.coldBacklogSample != (v >= 10) || dc.triage != (v >= 11) || dc.soleDecodeISL != (v >= 12) ||
			dc.backlogPick != (v >= 13) || dc.itlSpanPrompt != (v >= 14) || dc.backlogMissLimit != (v >= 14) ||
			dc.coldSoleISL != (v >= 15) || dc.soleResidence != (v >= 15) {
			t.Errorf("version %d: backlog %v, itl-bound charge %v, cold guard at the sample %v, sole decode busy fallback %v, itl guard aside behind a backlog %v, cold guard at the sample behind a deep backlog %v, triage %v, sole decode ISL %v, backlog pick %v, prompt within the ITL SLO %v, backlog charge limit %v, cold guard spares a short prompt at a sole decode worker %v, residence charge %v",
				v, dc.backlog, dc.itlBoundCharge, dc.coldSoleDecode, dc.coldSoleBusy, dc.backlogITLGuard, dc.coldBacklogSample, dc.triage, dc.soleDecodeISL, dc.backlogPick, dc.itlSpanPrompt, dc.backlogMissLimit, dc.coldSoleISL, dc.soleResidence)
		}
	}
	other := DefaultConfig()
	other.Disagg.Policy = PolicyISLBounding
	if dc, err := NewAt(other, Version); err != nil || dc.backlogPick {
		t.Errorf("isl_bounding at version %d: backlog pick %v (err %v); want false", Version, dc != nil && dc.backlogPick, err)
	}
}
