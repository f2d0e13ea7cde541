package statestore

import (
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// TestPeerDecisionAppliesAsOwn: a replica that applies another replica's
// decisions (decoded for apply: header, two rows, one chain) reaches the
// keyspace, digest, active accounting and latency model of the replica
// that made them and applied its whole records; decisions remote and
// local, of prompts with a trailing partial block, the prefill row's
// overlap counted, every row carrying each feature the latency model reads
// (decider.PathInputs), half the decisions joined with an outcome.
func TestPeerDecisionAppliesAsOwn(t *testing.T) {
	own, peer := perfHarness(t), perfHarness(t)
	ds := perfDecisions(300, 7, 1e18)
	withLatencyFeatures(ds, rand.New(rand.NewPCG(7, 5)))
	var recs []*kgo.Record
	for i, d := range ds {
		r := own.record(d.GetDecodeWorker().GetWorkerId(), d)
		if err := recordLocal(own.s, d, r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
		if i%2 == 0 {
			recs = append(recs, own.record(d.GetDecodeWorker().GetWorkerId(), completedOutcome(d, i)))
		}
	}
	for lo := 0; lo < len(recs); lo += 64 {
		own.apply(recs[lo:min(lo+64, len(recs))]...)
		peer.apply(recs[lo:min(lo+64, len(recs))]...)
	}
	if diff := diffKeys(dumpKeys(t, own.s), dumpKeys(t, peer.s)); len(diff) > 0 {
		t.Fatalf("the peer's keyspace differs from the deciding replica's: %v", diff[:min(len(diff), 5)])
	}
	if a, b := own.digest(), peer.digest(); a.Hash != b.Hash {
		t.Fatalf("digests differ: %s vs %s", a, b)
	}
	if lat := latencyKeys(t, own.s); len(lat) < len(ds) {
		t.Fatalf("%d latency model keys for %d decisions: the comparison shows little", len(lat), len(ds))
	}
	own.s.Read(func(ov View) {
		peer.s.Read(func(pv View) {
			of, pf := ov.LatencyFit(), pv.LatencyFit()
			if of == nil || pf == nil || *of != *pf {
				t.Fatalf("latency fits differ: %+v on the deciding replica, %+v on the peer", of, pf)
			}
			if of.Samples[decider.PathLocal][decider.TargetITL] == 0 || of.Samples[decider.PathRemote][decider.TargetTTFT] == 0 {
				t.Fatalf("the fit has no samples on a path: %v", of.Samples)
			}
			busy := 0
			for ref, w := range ov.Workers() {
				if pv.Workers()[ref].ID != w.ID {
					t.Fatalf("worker %d is %s on one replica and %s on the other", ref, w.ID, pv.Workers()[ref].ID)
				}
				a, b := ov.Active(ref), pv.Active(ref)
				if a != b {
					t.Errorf("%s: active load %+v on the deciding replica, %+v on the peer", w.ID, a, b)
				}
				if a.PrefillTokens > 0 {
					busy++
				}
			}
			if busy == 0 {
				t.Fatal("no worker carries prefill tokens: the comparison shows nothing")
			}
		})
	})
}

// TestPeerDecisionServedAsHeader: a peer's decision, applied and not yet
// committed, then committed, is served as its header and position
// (Complete false), never as a whole record: the rows kept for the apply
// rules are gone from it.
func TestPeerDecisionServedAsHeader(t *testing.T) {
	h := perfHarness(t)
	d := perfDecisions(1, 9, 1e18)[0]
	r := h.record(d.GetDecodeWorker().GetWorkerId(), d)
	check := func(when string) {
		for _, get := range []func() (StoredDecision, bool){
			func() (StoredDecision, bool) { return h.s.Decision(d.GetDecisionId()) },
			func() (StoredDecision, bool) { return h.s.DecisionForRequest(d.GetRequestId()) },
		} {
			sd, ok := get()
			if !ok || sd.Complete || sd.Partition != r.Partition || sd.Offset != r.Offset {
				t.Fatalf("%s: got %v complete %v at %d/%d, want the header at %d/%d", when, ok, sd.Complete, sd.Partition, sd.Offset, r.Partition, r.Offset)
			}
			if len(sd.Record.GetCandidates()) != 0 || len(sd.Record.GetChains()) != 0 || sd.Record.GetDecisionId() != d.GetDecisionId() {
				t.Fatalf("%s: the served record holds %d rows and %d chains", when, len(sd.Record.GetCandidates()), len(sd.Record.GetChains()))
			}
		}
	}
	var pending bool
	testHookBeforeCommit = func() { pending = h.s.st.dec.pending[d.GetDecisionId()].sd.Record != nil; check("pending") }
	h.apply(r)
	testHookBeforeCommit = nil
	if !pending {
		t.Fatal("the decision was not pending before the commit")
	}
	check("committed")
	if ref, ok := h.s.DecisionRefForRequest(d.GetRequestId()); !ok || ref.DecodeWorker.GetWorkerId() != d.GetDecodeWorker().GetWorkerId() {
		t.Fatalf("ref %+v %v", ref, ok)
	}
}

// withLatencyFeatures gives every row of ds a value of each feature the
// latency model reads from it, so that a row field the peer's decode left
// out would change the model.
func withLatencyFeatures(ds []*pb.DecisionRecord, rng *rand.Rand) {
	for _, d := range ds {
		for _, c := range d.GetCandidates() {
			c.HostBlocks, c.DiskBlocks = uint32(rng.IntN(64)), uint32(rng.IntN(64))
			c.ActivePrefillTokens, c.ActiveRequests = rng.Int64N(1<<16), 1+rng.Int64N(256)
			c.RecentLocalPrefill, c.PotentialDecodeBlocks = rng.Int64N(1<<16), rng.Int64N(1<<20)
			c.LoadKnown, c.LoadKvUsedBlocks = rng.IntN(2) == 0, rng.Int64N(1<<20)
		}
	}
}

// completedOutcome is a completion of d with a TTFT and a mean ITL (i varies them).
func completedOutcome(d *pb.DecisionRecord, i int) *pb.OutcomeEvent {
	ttft, itl, out := float64(100+(i*7919)%3000), 10+float64(i%41)/4, uint64(2+i%300)
	return &pb.OutcomeEvent{RequestId: d.GetRequestId(), DecisionId: d.GetDecisionId(), DecodeWorker: d.GetDecodeWorker(),
		PrefillWorker: d.GetPrefillWorker(), Kind: pb.OutcomeEvent_KIND_COMPLETED, EventTimeUnixNano: d.GetDecidedAtUnixNano() + 1e6,
		TtftMs: &ttft, ItlMsMean: &itl, OutputTokens: &out}
}
