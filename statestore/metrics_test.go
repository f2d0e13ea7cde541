package statestore

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// TestStateMetricsFollowTheState: what Apply sets at every batch through
// children it resolved once reads the state: every registered (worker, rank)
// counted in exactly one state of its pool, each partition's next offset,
// the blocks held by tier, and the clears counted by cause.
func TestStateMetricsFollowTheState(t *testing.T) {
	h := newHarness(t, 2)
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 1))
	h.put("d2", registration("d2", pb.Pool_POOL_DECODE, 4, 2))
	h.put("p1", registration("p1", pb.Pool_POOL_PREFILL, 4, 1))
	h.put("d1", kvRec("d1", 0, 10, stored(pb.Tier_TIER_DEVICE, nil, chainOf("a", 2, 4), tokens("a", 0, 2, 4), 4)))
	h.put("d2", kvRec("d2", 1, 20, clearedEv()))
	m := h.s.met
	for pool, want := range map[string]float64{"decode": 3, "prefill": 1} {
		got := 0.0
		for _, k := range workerSeries {
			if k.pool == pool {
				got += testutil.ToFloat64(m.workers.WithLabelValues(k.pool, k.state))
			}
		}
		if got != want {
			t.Errorf("pdrouter_workers{pool=%q} sums to %v, want %v (one per registered rank)", pool, got, want)
		}
	}
	offs := h.s.Offsets()
	if len(offs) == 0 {
		t.Fatal("no offsets")
	}
	for _, o := range offs {
		if got := testutil.ToFloat64(m.offset.WithLabelValues(string(o.Topic), strconv.Itoa(int(o.Partition)))); got != float64(o.Next) {
			t.Errorf("pdrouter_statestore_offset{%s,%d} = %v, want %d", o.Topic, o.Partition, got, o.Next)
		}
	}
	if got := testutil.ToFloat64(m.blocks.WithLabelValues(TierDevice.String())); got != 3 {
		t.Errorf("pdrouter_statestore_blocks{tier=device} = %v, want the 3 blocks d1 stored", got)
	}
	if got := testutil.ToFloat64(m.resets.WithLabelValues(causeCleared)); got != 1 {
		t.Errorf("clears by cause cleared = %v, want 1", got)
	}
}
