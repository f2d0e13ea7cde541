package replay_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/replay"
)

// sloRecords decides the generated cases again under the slo policy with a warm latency
// model (TTFT grows with the prompt to prefill and the queue ahead; ITL is flat), and
// records them as the API does.
func sloRecords(t *testing.T, n int, seed uint64) []*pb.DecisionRecord {
	t.Helper()
	return sloRecordsFit(t, n, seed, nil)
}

// sloRecordsFit is sloRecords with the fit changed by tweak first.
func sloRecordsFit(t *testing.T, n int, seed uint64, tweak func(*decider.LatencyFit)) []*pb.DecisionRecord {
	t.Helper()
	cfg := islConfig()
	cfg.Disagg.Policy = decider.PolicySLO
	dc, err := decider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fit := &decider.LatencyFit{}
	for p := range fit.Samples {
		for tg := range fit.Samples[p] {
			fit.Samples[p][tg], fit.Sigma[p][tg] = 500, 100
		}
	}
	fit.Coef[decider.PathLocal][decider.TargetTTFT] = [decider.LatencyK]float64{100, 0.3, 0, 0.2}
	fit.Coef[decider.PathRemote][decider.TargetTTFT] = [decider.LatencyK]float64{400, 0.1, 0, 0.1}
	fit.Mean[decider.PathRemote][decider.TargetTTFT] = 1900 // near the SLO, so that delays cost goodput
	fit.Coef[decider.PathLocal][decider.TargetITL][0] = 20
	fit.Coef[decider.PathRemote][decider.TargetITL][0] = 15
	if tweak != nil {
		tweak(fit)
	}
	var out []*pb.DecisionRecord
	for _, c := range generate(t, n, seed, islConfig()) {
		c.View.SetLatencyFit(fit)
		d, err := dc.Decide(c.View, c.Req)
		if err != nil {
			t.Fatal(err)
		}
		rec := replay.RecordOf(d, c.Rec)
		rec.ConfigJson = string(cfg.CanonicalJSON())
		out = append(out, rec)
	}
	return out
}

// TestWhatIfUnderSLO: records decided by the slo policy carry the fit they were
// decided with, so a what-if under their own config flips nothing, and a stricter
// TTFT SLO changes decisions (here remote prefills, whose predicted TTFT carries the
// transfer, go local).
func TestWhatIfUnderSLO(t *testing.T) {
	recs := sloRecords(t, 400, 5)
	local := 0
	for _, r := range recs {
		if r.GetSlo() == nil || !r.GetSlo().GetWarm() || r.GetSlo().GetFit() == nil {
			t.Fatalf("record without its slo predictions: %v", r.GetSlo())
		}
		if r.GetMode() == "local" {
			local++
		}
	}
	same, err := replay.WhatIf(context.Background(), sliceSource(recs), replay.WhatIfOptions{Disagg: []byte(`{"policy":"slo"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if same.Flips != 0 || same.BaselineMismatches != 0 || same.Skipped != 0 || same.LocalBefore != local || local == 0 || local == len(recs) {
		t.Fatalf("same config: %+v (local %d of %d)", same, local, len(recs))
	}
	charged := 0
	for _, r := range recs {
		if s := r.GetSlo(); s.GetLocalDelayCharge() > 0 && s.GetRemoteDelayCharge() > 0 && s.GetTypicalTtftMs() == 1900 {
			charged++
		}
	}
	if charged == 0 {
		t.Fatal("no record carries both delay charges: the what-if does not exercise them")
	}
	strict, err := replay.WhatIf(context.Background(), sliceSource(recs), replay.WhatIfOptions{Disagg: []byte(`{"policy":"slo","slo_ttft_ms":900}`)})
	if err != nil {
		t.Fatal(err)
	}
	if strict.Flips == 0 || strict.BaselineMismatches != 0 || strict.Skipped != 0 {
		t.Fatalf("slo_ttft_ms 900: %+v", strict)
	}
	t.Logf("%d decisions, %d local; with slo_ttft_ms 900: %d local→remote, %d remote→local", len(recs), local, strict.LocalToRemote, strict.RemoteToLocal)
}

// TestRecomputeSLORecordByteForByte: an slo record recomputes from itself to the same
// record bytes (explain's check), predictions and margin included.
func TestRecomputeSLORecordByteForByte(t *testing.T) {
	for _, rec := range sloRecords(t, 50, 6) {
		cfg, err := replay.ParseConfig(rec.GetConfigJson())
		if err != nil {
			t.Fatal(err)
		}
		dc, err := decider.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var d decider.Decision
		got, err := replay.RecomputeWith(dc, rec, &d)
		if err != nil {
			t.Fatal(err)
		}
		want := replay.DecisionOf(rec)
		if string(got.AppendCanonicalJSON(nil)) != string(want.AppendCanonicalJSON(nil)) {
			t.Fatalf("recomputed\n%s\nrecorded\n%s", got.AppendCanonicalJSON(nil), want.AppendCanonicalJSON(nil))
		}
	}
}

// TestWhatIfSLOOnOtherPoliciesRecordsIsCold: records of another policy carry no fit,
// so under slo they recompute as its cold start (isl_or_load with the decode guard),
// and what-if says so through the cold-start reasons rather than failing.
func TestWhatIfSLOOnOtherPoliciesRecordsIsCold(t *testing.T) {
	recs := records(generate(t, 200, 7, islConfig()))
	rep, err := replay.WhatIf(context.Background(), sliceSource(recs), replay.WhatIfOptions{Disagg: []byte(`{"policy":"slo"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Skipped != 0 || rep.Decisions != 200 {
		t.Fatalf("%+v", rep)
	}
	for _, f := range rep.ByReason {
		if f.To != string(decider.ReasonSLOColdLocal) && f.To != string(decider.ReasonSLOColdRemote) {
			t.Fatalf("flip to %s: not a cold-start reason", f.To)
		}
	}
}

// TestExplainShowsSLOPredictions: explain of an slo decision states both predictions,
// the SLOs and the margin, and its pure check passes.
func TestExplainShowsSLOPredictions(t *testing.T) {
	rec := sloRecords(t, 5, 8)[0]
	e := replay.Explain(context.Background(), rec, replay.ExplainOptions{})
	if e.ModeDecision.SLO == nil || !e.ModeDecision.SLO.Warm || e.ModeDecision.SLO.TTFTLimitMs != 2000 {
		t.Fatalf("mode decision: %+v", e.ModeDecision)
	}
	var b strings.Builder
	if err := e.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"slo: warm true", "margin", "predicted local TTFT", "delay charges on a typical request of 1900 ms"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("explain text lacks %q:\n%s", want, b.String())
		}
	}
	if pc := e.PureCheck; !pc.Identical || !pc.RecordBytesIdentical {
		t.Fatalf("pure check: %+v", e.PureCheck)
	}
}

// TestExplainShowsQueueCap: in a fleet whose local path is rare in the model's
// samples, local prefills that would queue past the cap are recorded as the queue
// cap's; explain states the queue's prefill time against the cap, and recomputes each
// such record to the same bytes.
func TestExplainShowsQueueCap(t *testing.T) {
	recs := sloRecordsFit(t, 400, 9, func(f *decider.LatencyFit) {
		f.Samples[decider.PathLocal][decider.TargetTTFT] = 60 // of 2,060: under 5%
		f.Samples[decider.PathRemote][decider.TargetTTFT] = 2000
		f.Coef[decider.PathRemote][decider.TargetTTFT][1] = 1 // 1 ms per token: a cap of 1000 tokens
	})
	capped := 0
	for _, rec := range recs {
		if rec.GetReason() != string(decider.ReasonSLODeniedQueueCap) {
			continue
		}
		capped++
		e := replay.Explain(context.Background(), rec, replay.ExplainOptions{})
		m := e.ModeDecision
		if m.DecidedBy != string(decider.CheckSLOQueueCap) || m.Limit != 1000 || m.Value-m.Limit != m.Distance || m.Distance <= 0 || !m.Known {
			t.Fatalf("mode decision: %+v", m)
		}
		var b strings.Builder
		if err := e.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "local prefill queue would take") {
			t.Fatalf("explain text lacks the queue:\n%s", b.String())
		}
		if pc := e.PureCheck; !pc.Identical || !pc.RecordBytesIdentical {
			t.Fatalf("pure check: %+v", e.PureCheck)
		}
	}
	if capped == 0 {
		t.Fatal("no decision was capped: the test does not exercise the queue cap")
	}
	t.Logf("%d of %d decisions capped", capped, len(recs))
}

// TestExportKeepsSLOPredictions: an slo record exported as parquet or JSON lines turns
// back into the same record (its predictions, fit and the candidate rows' counts
// included), so `whatif --input` on an export recomputes slo decisions warm, as on
// the log.
func TestExportKeepsSLOPredictions(t *testing.T) {
	recs := sloRecords(t, 40, 9)
	dir := t.TempDir()
	for _, f := range []replay.Format{replay.FormatParquet, replay.FormatJSONL} {
		path := filepath.Join(dir, "decisions."+string(f))
		out, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w, err := replay.NewRowWriter[replay.DecisionRow](out, f, "decisions")
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			if err := w.Write(replay.DecisionRowOf(r, replay.Position{Partition: 0, Offset: int64(i)})); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		out.Close()
		rows, err := replay.ReadRows[replay.DecisionRow](path)
		if err != nil || len(rows) != len(recs) {
			t.Fatalf("%s: %d rows, %v", f, len(rows), err)
		}
		var back []*pb.DecisionRecord
		for i := range rows {
			rec, err := replay.RecordOfRow(&rows[i])
			if err != nil {
				t.Fatal(err)
			}
			want := proto.Clone(recs[i]).(*pb.DecisionRecord)
			want.Chains = nil
			if !proto.Equal(rec, want) {
				t.Fatalf("%s row %d does not turn back into its record:\n%v\n%v", f, i, rec, want)
			}
			back = append(back, rec)
		}
		rep, err := replay.WhatIf(context.Background(), sliceSource(back), replay.WhatIfOptions{Disagg: []byte(`{"policy":"slo"}`)})
		if err != nil || rep.Flips != 0 || rep.BaselineMismatches != 0 || rep.Skipped != 0 {
			t.Fatalf("%s: what-if of the export under its own config: %+v, %v", f, rep, err)
		}
	}
}
