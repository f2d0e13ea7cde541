package statestore

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// sampledDecision is ownDecision with the latency features a writer's
// delta carries.
func sampledDecision(w, id, decode string, at int64, tokens uint32) *pb.LoadDelta {
	d := ownDecision(w, id, decode, "", at, tokens)
	d.Decisions[0].LatencyInputs = []uint32{tokens, 0, 64, 2, 30, 0, 0, 7, 16}
	return d
}

// ended is ownEnd of kind with the TTFT and ITL it measured (negative:
// absent).
func ended(w, id, decode string, at int64, kind pb.OutcomeEvent_Kind, ttft, itl float64) *pb.LoadDelta {
	d := ownEnd(w, id, decode, at)
	e := d.Lifecycle[0]
	e.Kind = kind
	if ttft >= 0 {
		e.TtftMs = proto.Float64(ttft)
	}
	if itl >= 0 {
		e.ItlMsMean, e.OutputTokens = proto.Float64(itl), proto.Uint64(40)
	}
	return d
}

// TestLatencySamplesShared: a request of the writer that ended goes, as its
// model joined it, with the writer's next snapshot; a peer that applies the
// snapshot holds the same facts, the writer learns nothing from its own; a
// snapshot the log refused sends its samples again; a request the model
// joined no target of sends none.
func TestLatencySamplesShared(t *testing.T) {
	w := sharesHarness(t, Options{SharesEpoch: 1000})
	peer := sharesHarness(t, Options{ReplicaID: "replica-b"})
	w.put("w1", sampledDecision(shareReplica, "d1", "w1", shareT0, 512))
	w.put("w1", ended(shareReplica, "d1", "w1", shareT0+sec/2, pb.OutcomeEvent_KIND_PREFILL_DONE, 180.25, -1))
	if s := w.take(); len(s.GetSamples()) != 0 {
		t.Fatalf("a sample before the request ended: %v", s.GetSamples())
	}
	w.put("w1", ended(shareReplica, "d1", "w1", shareT0+2*sec, pb.OutcomeEvent_KIND_COMPLETED, -1, 12.5))
	w.put("w1", sampledDecision(shareReplica, "d2", "w1", shareT0+2*sec, 64))
	w.put("w1", ended(shareReplica, "d2", "w1", shareT0+3*sec, pb.OutcomeEvent_KIND_CANCELLED, -1, -1))
	s := w.take()
	if len(s.GetSamples()) != 1 {
		t.Fatalf("samples %v; want d1's alone (d2 measured nothing)", s.GetSamples())
	}
	want := &pb.LatencySample{DecisionId: "d1", DecidedAtUnixNano: shareT0, LatencyInputs: []uint32{512, 0, 64, 2, 30, 0, 0, 7, 16},
		TtftUnits: proto.Uint32(1803), TtftAtUnixNano: shareT0 + sec/2, ItlUnits: proto.Uint32(125), ItlAtUnixNano: shareT0 + 2*sec}
	if !proto.Equal(s.GetSamples()[0], want) {
		t.Fatalf("sample %v\nwant %v", s.GetSamples()[0], want)
	}
	w.wantCount("pdrouter_statestore_latency_samples_total", map[string]string{"result": "sent"}, 1)

	peer.put(shareReplica, s)
	peer.wantCount("pdrouter_statestore_latency_samples_total", map[string]string{"result": "learned"}, 1)
	wj, _ := w.s.st.lat.Joined("d1")
	pj, ok := peer.s.st.lat.Joined("d1")
	if !ok || pj != wj {
		t.Fatalf("the peer holds %+v (%v), the writer %+v", pj, ok, wj)
	}
	if a, b := fmt.Sprint(w.s.st.lat.Fit()), fmt.Sprint(peer.s.st.lat.Fit()); a != b {
		t.Fatalf("fits differ:\n%s\n%s", a, b)
	}
	// The writer reads its own snapshot back: it holds those facts.
	w.put(shareReplica, s)
	w.wantCount("pdrouter_statestore_latency_samples_total", map[string]string{"result": "learned"}, 0)
	w.wantCount("pdrouter_statestore_latency_samples_total", map[string]string{"result": "sent"}, 1) // counted once, whoever flushes

	// A snapshot the log refused: its sample goes again, once.
	w.put("w1", sampledDecision(shareReplica, "d3", "w1", shareT0+4*sec, 64))
	w.put("w1", ended(shareReplica, "d3", "w1", shareT0+5*sec, pb.OutcomeEvent_KIND_COMPLETED, 90, 11))
	lost := w.take()
	w.s.SharesNotSent(lost)
	again := w.take()
	if len(lost.GetSamples()) != 1 || len(again.GetSamples()) != 1 || !proto.Equal(lost.GetSamples()[0], again.GetSamples()[0]) {
		t.Fatalf("refused %v, then sent %v", lost.GetSamples(), again.GetSamples())
	}
	if s := w.take(); s != nil {
		t.Fatalf("a snapshot with nothing left: %v", s)
	}
}

// TestLatencySamplesBounded: past maxEnded waiting requests the oldest are
// dropped and counted, and a snapshot carries at most MaxSamplesSent, the
// rest going with the next ones.
func TestLatencySamplesBounded(t *testing.T) {
	w := sharesHarness(t, Options{LatencySamplesPerSecond: 1e9})
	n := 300
	for i := range n {
		id := fmt.Sprintf("d%03d", i)
		w.put("w1", sampledDecision(shareReplica, id, "w1", shareT0+int64(i), 64))
		w.put("w1", ended(shareReplica, id, "w1", shareT0+int64(i)+sec, pb.OutcomeEvent_KIND_COMPLETED, 50, 10))
	}
	first, second := w.take(), w.take()
	if len(first.GetSamples()) != 256 || len(second.GetSamples()) != n-256 || second.GetSamples()[0].GetDecisionId() != "d256" {
		t.Fatalf("snapshots of %d and %d samples, want 256 and %d from d256", len(first.GetSamples()), len(second.GetSamples()), n-256)
	}
	// maxEnded waiting, then one more: the oldest goes.
	w.s.mu.Lock()
	for i := range maxEnded {
		w.s.st.own.ended = append(w.s.st.own.ended, fmt.Sprintf("x%d", i))
	}
	w.s.mu.Unlock()
	w.put("w1", sampledDecision(shareReplica, "last", "w1", shareT0+2*sec, 64))
	w.put("w1", ended(shareReplica, "last", "w1", shareT0+3*sec, pb.OutcomeEvent_KIND_COMPLETED, 50, 10))
	w.s.mu.Lock()
	n, oldest, newest := len(w.s.st.own.ended), w.s.st.own.ended[0], w.s.st.own.ended[len(w.s.st.own.ended)-1]
	w.s.mu.Unlock()
	if n != maxEnded || oldest != "x1" || newest != "last" {
		t.Fatalf("%d ids waiting, from %s to %s; want %d, from x1 to last", n, oldest, newest, maxEnded)
	}
	w.wantCount("pdrouter_statestore_latency_samples_total", map[string]string{"result": "dropped"}, 1)
}

// TestLatencySamplesBudget: a writer sends at most
// LatencySamplesPerSecond samples a second of its requests' event time,
// after a burst of one second's worth, and counts the rest thinned; a
// negative rate sends none.
func TestLatencySamplesBudget(t *testing.T) {
	end := func(h *harness, i int, at int64) {
		id := fmt.Sprintf("d%03d", i)
		h.put("w1", sampledDecision(shareReplica, id, "w1", at-sec, 64))
		h.put("w1", ended(shareReplica, id, "w1", at, pb.OutcomeEvent_KIND_COMPLETED, 50, 10))
	}
	sent := func(h *harness) int {
		n := 0
		for s := h.take(); s != nil; s = h.take() {
			n += len(s.GetSamples())
		}
		return n
	}
	w := sharesHarness(t, Options{LatencySamplesPerSecond: 10})
	for i := range 30 { // 30 ends in 30 ms: the burst's 10 go
		end(w, i, shareT0+int64(i)*1e6)
	}
	if n := sent(w); n != 10 {
		t.Fatalf("%d samples of a burst of 30, want 10", n)
	}
	for i := range 30 { // 30 ends over the next 3 s: one each 100 ms
		end(w, 100+i, shareT0+30e6+int64(i+1)*100e6)
	}
	if n := sent(w); n != 30 {
		t.Fatalf("%d samples of 30 ends 100 ms apart, want 30", n)
	}
	w.wantCount("pdrouter_statestore_latency_samples_total", map[string]string{"result": "thinned"}, 20)

	none := sharesHarness(t, Options{LatencySamplesPerSecond: -1})
	end(none, 1, shareT0)
	if n := sent(none); n != 0 {
		t.Fatalf("%d samples with none allowed", n)
	}
}
