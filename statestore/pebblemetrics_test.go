package statestore

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	dto "github.com/prometheus/client_model/go"
)

// gathered returns the value of each unlabelled series of reg by name.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) > 0 {
				continue
			}
			switch mf.GetType() {
			case dto.MetricType_GAUGE:
				out[mf.GetName()] = m.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				out[mf.GetName()] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// TestPebbleMetrics: the store's Pebble series exist from its opening,
// follow a flush of applied records (disk bytes, flushes and their bytes),
// and read zero once the store is closed instead of failing the scrape.
func TestPebbleMetrics(t *testing.T) {
	h := newHarness(t, 16)
	reg := h.reg
	names := []string{"pdrouter_statestore_disk_bytes", "pdrouter_statestore_memtable_bytes",
		"pdrouter_statestore_compaction_debt_bytes", "pdrouter_statestore_read_amplification",
		"pdrouter_statestore_compactions_total", "pdrouter_statestore_compaction_seconds_total",
		"pdrouter_statestore_compacted_bytes_total", "pdrouter_statestore_flushes_total",
		"pdrouter_statestore_flushed_bytes_total"}
	before := gathered(t, reg)
	for _, n := range names {
		if _, ok := before[n]; !ok {
			t.Fatalf("%s is not exported by a store just opened", n)
		}
	}
	for _, d := range perfDecisions(2000, 9, 1e18) {
		h.put(d.GetDecodeWorker().GetWorkerId(), d)
	}
	if err := h.s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	after := gathered(t, reg)
	if after["pdrouter_statestore_flushes_total"] <= before["pdrouter_statestore_flushes_total"] ||
		after["pdrouter_statestore_flushed_bytes_total"] <= before["pdrouter_statestore_flushed_bytes_total"] ||
		after["pdrouter_statestore_disk_bytes"] <= before["pdrouter_statestore_disk_bytes"] {
		t.Fatalf("after applying 2,000 decisions and a flush: %v, before: %v", after, before)
	}
	if err := h.s.Close(); err != nil {
		t.Fatal(err)
	}
	closed := gathered(t, reg)
	for _, n := range names {
		if v, ok := closed[n]; !ok || v != 0 {
			t.Errorf("%s of a closed store: %v (exported %v), want 0", n, v, ok)
		}
	}
	h.s = nil
}
