package door

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestAddedLatencyResolvesTheBar: the door's added latency is judged
// against a 2 ms bar, so its histogram must tell 100 µs from 200 µs and
// 1.5 ms from 2.5 ms: between 100 µs and 10 ms no bucket is wider than
// twice its lower bound, one bound is the bar itself, and the buckets
// still reach a minute (a slow tokenize or decision append).
func TestAddedLatencyResolvesTheBar(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	for _, v := range []float64{0.00015, 0.0015, 0.0025} {
		m.added.Observe(v)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var bounds []float64
	var counts []uint64
	for _, mf := range mfs {
		if mf.GetName() != "pdrouter_door_added_latency_seconds" {
			continue
		}
		for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
			counts = append(counts, b.GetCumulativeCount())
		}
	}
	if len(bounds) == 0 {
		t.Fatal("pdrouter_door_added_latency_seconds not registered")
	}
	if bounds[0] > 0.0001 {
		t.Fatalf("the first bucket ends at %gs: latencies under it are not told apart (want ≤ 100µs)", bounds[0])
	}
	bar := false
	for i, b := range bounds {
		bar = bar || b == 0.002
		if i > 0 && bounds[i-1] >= 0.0001 && bounds[i-1] < 0.01 && b > 2*bounds[i-1] {
			t.Errorf("bucket (%g, %g] is wider than twice its lower bound", bounds[i-1], b)
		}
	}
	if !bar {
		t.Errorf("no bucket ends at the 2 ms bar: %v", bounds)
	}
	if last := bounds[len(bounds)-1]; last < 60 {
		t.Errorf("the last bucket ends at %gs, want ≥ 60s", last)
	}
	// The three observations land in three buckets.
	seen := map[uint64]bool{}
	for _, c := range counts {
		seen[c] = true
	}
	for _, want := range []uint64{1, 2, 3} {
		if !seen[want] {
			t.Errorf("the observations 150µs, 1.5ms and 2.5ms do not fall in three buckets: cumulative counts %v over bounds %v", counts, bounds)
			break
		}
	}
}
