package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/events"
)

// Two replicas of --load-deltas snapshots behind a balancer: a request
// routed by A and completed through B is released on A, through the
// forwards topic (B answers 202, forwarded); the same completion forwarded
// again releases nothing more; an id no replica holds is forwarded too,
// and each replica counts it not_mine.
func TestSnapshotsForwardLifecycleEvents(t *testing.T) {
	a, b, after := snapshotPair(t)

	// Another request on A keeps its fleet busy, so a second release of
	// the forwarded one would show as a count below it.
	routeOn(t, a.url, "fwd-stays", append(tokenSeq(1, 512), tokenSeq(80001, 64)...), after, false)
	base := activeBlocks(t, a.url)
	resp := routeOn(t, a.url, "fwd-1", append(tokenSeq(1, 512), tokenSeq(40001, 64)...), after, false)
	dw, _ := resp["decode_worker"].(string)
	if busy := activeBlocks(t, a.url); busy[dw] <= base[dw] {
		t.Fatalf("A's active decode blocks on %q: %d → %d after routing fwd-1", dw, base[dw], busy[dw])
	}

	forward := func(r *replica, id string) {
		t.Helper()
		code, raw, err := post(r.url+"/v1/requests/"+id+"/events", map[string]any{"event": "completed", "output_tokens": 12, "itl_ms_mean": 20.5})
		var body struct {
			Forwarded bool                        `json:"forwarded"`
			Offsets   map[string]map[string]int64 `json:"offsets"`
		}
		if err != nil || code != http.StatusAccepted || json.Unmarshal(raw, &body) != nil || !body.Forwarded || len(body.Offsets[string(events.TopicForwards)]) != 1 {
			t.Fatalf("completing %s on %s: %d %s %v; want 202, forwarded, with its offset on forwards", id, r.url, code, raw, err)
		}
	}
	forward(b, "fwd-1")
	if got := waitActive(t, a, dw, func(n int64) bool { return n == base[dw] }); got[dw] != base[dw] {
		t.Fatalf("A counts %d active decode blocks on %s after fwd-1 completed through B, want %d as before it", got[dw], dw, base[dw])
	}
	waitMetric(t, a, `pdrouter_forwarded_events_total{result="applied"}`, 1)
	waitMetric(t, b, `pdrouter_forwarded_events_total{result="not_mine"}`, 1)
	if n := metricSum(t, b.url, `pdrouter_forwarded_events_total{result="sent"}`); n != 1 {
		t.Errorf("B sent %v forwards, want 1", n)
	}

	// At least once: the same event again is applied again and changes
	// nothing.
	forward(b, "fwd-1")
	waitMetric(t, a, `pdrouter_forwarded_events_total{result="applied"}`, 2)
	waitSynced(t, a) // A's store has applied its second completion
	if got := activeBlocks(t, a.url); got[dw] != base[dw] {
		t.Errorf("a repeated completion of fwd-1: A counts %d active decode blocks on %s, want %d", got[dw], dw, base[dw])
	}

	// Nobody's request: indistinguishable from a peer's on the replica it
	// is posted to, and not_mine on every reader.
	forward(a, "fwd-nobody")
	waitMetric(t, a, `pdrouter_forwarded_events_total{result="not_mine"}`, 1)
	waitMetric(t, b, `pdrouter_forwarded_events_total{result="not_mine"}`, 3)
	for _, r := range []*replica{a, b} {
		if n := metricSum(t, r.url, `pdrouter_forwarded_events_total{result="invalid"}`) + metricSum(t, r.url, `pdrouter_forwarded_events_total{result="failed"}`); n != 0 {
			t.Errorf("%s counted %v invalid or failed forwards", r.url, n)
		}
	}
}

// waitMetric waits until a counter of r reaches want, and fails past it or
// after 10 s.
func waitMetric(t *testing.T, r *replica, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := metricSum(t, r.url, name)
		if n > want {
			t.Fatalf("%s on %s is %v, want %v", name, r.url, n, want)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s stayed %v, want %v", name, r.url, n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
