package rejects

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestOneFamilyPerRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := For(reg), For(reg)
	a.Init(HTTP, "body_too_large")
	b.Init(ZMQBind, "frame_too_large")
	a.Inc(HTTP, "body_too_large")
	b.Inc(HTTP, "body_too_large")
	if got := a.Value(HTTP, "body_too_large"); got != 2 {
		t.Fatalf("two users of one registry count into one series: got %v, want 2", got)
	}
	// Initialized series exist at 0 before anything is refused.
	if n := testutil.CollectAndCount(a.vec, MetricName); n != 2 {
		t.Fatalf("series after Init: got %d, want 2", n)
	}
	if got := a.Value(ZMQBind, "frame_too_large"); got != 0 {
		t.Fatalf("an initialized series starts at 0, got %v", got)
	}
}

func TestNilRegistryCounts(t *testing.T) {
	c := For(nil)
	c.Inc(Scrape, "timeout")
	if got := c.Value(Scrape, "timeout"); got != 1 {
		t.Fatalf("got %v, want 1", got)
	}
}
