package statestore

import (
	"fmt"
	"testing"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// ownLifecycle is the load delta of a lifecycle event of kind for decision
// id of writer w, on decode.
func ownLifecycle(w, id, decode string, kind pb.OutcomeEvent_Kind, at int64) *pb.LoadDelta {
	return &pb.LoadDelta{WriterId: w, Lifecycle: []*pb.LifecycleDelta{{DecisionId: id, RequestId: "r" + id,
		Kind: kind, EventTimeUnixNano: at, DecodeWorker: &pb.WorkerRef{WorkerId: decode}}}}
}

// TestRepeatedLifecycleReleasesOnce: a prefill_done or completed applied
// again, at the same time or a later one, releases nothing more. The
// forward reader (api/forwards.go) delivers at least once, so after a
// crash between its append and its commit a replica of snapshots appends
// a forwarded event's outcome twice. Another request on the same workers
// stays counted whole, exactly as a store that never saw the released one
// counts it, and the writer's snapshots say the same. The same whether the
// store holds its own requests as facts or as open requests (PeerSums).
func TestRepeatedLifecycleReleasesOnce(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprintf("open=%v", open), func(t *testing.T) { testRepeatedLifecycleReleasesOnce(t, open) })
	}
}

func testRepeatedLifecycleReleasesOnce(t *testing.T, open bool) {
	// stays: a store that holds the other request alone.
	stays := sharesHarness(t, Options{SharesEpoch: 1000, PeerSums: open})
	stays.put("w1", ownDecision(shareReplica, "d2", "w1", "p1", shareT0+sec, 64))
	h := sharesHarness(t, Options{SharesEpoch: 1000, PeerSums: open})
	h.put("w1", ownDecision(shareReplica, "d1", "w1", "p1", shareT0, 100))
	h.put("w1", ownDecision(shareReplica, "d2", "w1", "p1", shareT0+sec, 64))
	h.take()
	// The active counts of decision d2 alone on w and on p1, which d1
	// must not change once it is released; recent counts are left out,
	// d1 stays in the window.
	wantAlone := func(step string) {
		t.Helper()
		for _, w := range []string{"w1", "p1"} {
			got, want := h.active(w), stays.active(w)
			if got.DecodeBlocks != want.DecodeBlocks || got.Requests != want.Requests || got.PrefillTokens != want.PrefillTokens {
				t.Fatalf("%s: %s counts %+v, want d2's alone %+v", step, w, got, want)
			}
		}
		h.take() // its shares are its view: checked by take
	}
	h.put("w1", ownLifecycle(shareReplica, "d1", "w1", pb.OutcomeEvent_KIND_PREFILL_DONE, shareT0+2*sec))
	if got, want := h.active("p1").PrefillTokens, stays.active("p1").PrefillTokens; got != want {
		t.Fatalf("after d1's prefill_done p1 counts %d prefill tokens, want d2's %d", got, want)
	}
	for i, at := range []int64{shareT0 + 2*sec, shareT0 + 3*sec} {
		h.put("w1", ownLifecycle(shareReplica, "d1", "w1", pb.OutcomeEvent_KIND_PREFILL_DONE, at))
		if got, want := h.active("p1").PrefillTokens, stays.active("p1").PrefillTokens; got != want {
			t.Fatalf("prefill_done again (%d): p1 counts %d prefill tokens, want d2's %d", i, got, want)
		}
	}
	for i, at := range []int64{shareT0 + 4*sec, shareT0 + 4*sec, shareT0 + 5*sec} {
		h.put("w1", ownLifecycle(shareReplica, "d1", "w1", pb.OutcomeEvent_KIND_COMPLETED, at))
		wantAlone(fmt.Sprintf("completed, %d times", i+1))
	}
	h.put("w1", ownLifecycle(shareReplica, "d1", "w1", pb.OutcomeEvent_KIND_PREFILL_DONE, shareT0+6*sec))
	wantAlone("prefill_done after completed")
}
