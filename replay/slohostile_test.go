package replay_test

import (
	"context"
	"math"
	"strings"
	"testing"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/replay"
)

// TestWhatIfSurvivesHostileFits: a record's recorded fit is read back from the
// log, so any float can be in it. Replaying records whose fits hold NaN, ±Inf and
// extreme values, or arrays cut short, under slo must answer every decision, never
// panic.
func TestWhatIfSurvivesHostileFits(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64, -math.MaxFloat64, 0} {
		recs := sloRecords(t, 60, 7)
		for _, r := range recs {
			f := r.GetSlo().GetFit()
			for i := range f.Coef {
				f.Coef[i] = v
			}
			for i := range f.Sigma {
				f.Sigma[i] = v
			}
			for i := range f.Mean {
				f.Mean[i] = v
			}
		}
		whatIfAll(t, recs, v)
	}
	// The rows' counts come from the log too: the delay charges read recent_requests.
	for _, n := range []int64{math.MaxInt64, math.MinInt64, -1} {
		recs := sloRecords(t, 60, 7)
		for _, r := range recs {
			for _, c := range r.GetCandidates() {
				c.RecentRequests = n
			}
		}
		whatIfAll(t, recs, n)
	}
	// The queue cap reads the fit's sample counts (which path is rare) and the decode
	// row's queued tokens; both come from the log as well.
	for _, n := range []int64{math.MaxInt64, math.MinInt64, -1} {
		recs := sloRecords(t, 60, 7)
		for _, r := range recs {
			samples := r.GetSlo().GetFit().GetSamples()
			for i := range samples {
				samples[i] = 1 << 40
			}
			if len(samples) > 0 {
				samples[0] = 60 // the local path's TTFT: rare, so the cap is evaluated
			}
			for _, c := range r.GetCandidates() {
				c.ActivePrefillTokens = n
			}
		}
		whatIfAll(t, recs, n)
	}
	recs := sloRecords(t, 60, 7)
	for i, r := range recs {
		f := r.GetSlo().GetFit()
		switch i % 3 {
		case 0:
			f.Coef = f.Coef[:len(f.Coef)/2]
		case 1:
			f.Sigma = f.Sigma[:1]
		case 2:
			f.Samples = nil
		}
	}
	whatIfAll(t, recs, "cut arrays")
}

func whatIfAll(t *testing.T, recs []*pb.DecisionRecord, what any) {
	t.Helper()
	rep, err := replay.WhatIf(context.Background(), sliceSource(recs), replay.WhatIfOptions{Disagg: []byte(`{"policy":"slo","slo_ttft_ms":900}`)})
	if err != nil {
		t.Fatalf("fits with %v: %v", what, err)
	}
	if rep.Decisions != len(recs) {
		t.Fatalf("fits with %v: %d of %d decisions answered: %+v", what, rep.Decisions, len(recs), rep)
	}
}

// TestExplainSurvivesHostileSLOFields: explain reads a record's slo fields as
// written, so NaN and ±Inf in its predictions, delay charges and fit means must
// still give an explanation and its text, never a panic.
func TestExplainSurvivesHostileSLOFields(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		rec := sloRecords(t, 3, 7)[0]
		s := rec.GetSlo()
		s.LocalDelayCharge, s.RemoteDelayCharge, s.TypicalTtftMs, s.Margin, s.LocalTtftMs = v, v, v, v, v
		for i := range s.GetFit().GetMean() {
			s.GetFit().Mean[i] = v
		}
		e := replay.Explain(context.Background(), rec, replay.ExplainOptions{})
		var b strings.Builder
		if err := e.WriteText(&b); err != nil || !strings.Contains(b.String(), "delay charges") {
			t.Fatalf("%v: explain text %v:\n%s", v, err, b.String())
		}
		// A record that says the queue cap decided, at any distance.
		rec.DecidedBy, rec.Distance = "slo_queue_cap", v
		e = replay.Explain(context.Background(), rec, replay.ExplainOptions{})
		b.Reset()
		if err := e.WriteText(&b); err != nil || !strings.Contains(b.String(), "local prefill queue would take") {
			t.Fatalf("%v: queue cap explain text %v:\n%s", v, err, b.String())
		}
	}
}
