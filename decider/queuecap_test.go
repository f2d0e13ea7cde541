package decider

import (
	"math"
	"testing"
)

// TestQueueCapSurvivesHostileQueues: the decode row's queued tokens come from the
// log, so any int64 can be in them. A queue the sum with this prompt would overflow
// is the longest queue there is, and it is capped.
func TestQueueCapSurvivesHostileQueues(t *testing.T) {
	cfg := DefaultConfig().Disagg
	var fit LatencyFit
	fit.Samples[PathLocal][TargetTTFT], fit.Samples[PathRemote][TargetTTFT] = 10, 1000
	fit.Coef[PathRemote][TargetTTFT][1] = 0.001
	for _, tc := range []struct {
		queued, eff int64
		capped      bool
	}{
		{0, 1000, false},
		{999_000, 1000, false},      // 1000 ms: at the cap
		{999_001, 1000, true},       // past it
		{math.MaxInt64, 1000, true}, // would overflow as an int64 sum
		{math.MaxInt64, math.MaxInt64, true},
		{math.MinInt64, 1000, false}, // a negative queue counts as none
	} {
		ms, capped := sloQueueCap(&cfg, &fit, &Candidate{ActivePrefillTokens: tc.queued}, tc.eff)
		if capped != tc.capped || math.IsNaN(ms) || ms < 0 {
			t.Errorf("queued %d, eff %d: %v ms, capped %v; want capped %v", tc.queued, tc.eff, ms, capped, tc.capped)
		}
	}
}
