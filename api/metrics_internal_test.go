package api

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// TestDelayChargeSeries: both paths' delay charge histograms exist before any
// decision, only warm slo decisions are observed, and each observes its two charges.
func TestDelayChargeSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	hist := func(path string) *dto.Histogram {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != "pdrouter_slo_delay_charge" {
				continue
			}
			for _, s := range f.GetMetric() {
				if s.GetLabel()[0].GetValue() == path {
					return s.GetHistogram()
				}
			}
		}
		t.Fatalf("no pdrouter_slo_delay_charge series for path %q", path)
		return nil
	}
	if hist("local").GetSampleCount() != 0 || hist("remote").GetSampleCount() != 0 {
		t.Fatal("series not at 0 before any decision")
	}
	m.observeDecision(&pb.DecisionRecord{Mode: "remote", Reason: "x", Policy: "isl_bounding"})
	m.observeDecision(&pb.DecisionRecord{Mode: "remote", Reason: "slo_cold_start_remote", Policy: "slo",
		Slo: &pb.SloPrediction{Evaluated: true}})
	m.observeDecision(&pb.DecisionRecord{Mode: "remote", Reason: "slo_remote_predicted_better", Policy: "slo",
		Slo: &pb.SloPrediction{Evaluated: true, Warm: true, LocalDelayCharge: 1.5, RemoteDelayCharge: 0.25}})
	l, r := hist("local"), hist("remote")
	if l.GetSampleCount() != 1 || l.GetSampleSum() != 1.5 || r.GetSampleCount() != 1 || r.GetSampleSum() != 0.25 {
		t.Fatalf("local %d/%v, remote %d/%v", l.GetSampleCount(), l.GetSampleSum(), r.GetSampleCount(), r.GetSampleSum())
	}
}
