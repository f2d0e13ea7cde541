package statestore

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPeerDecisionAppliesAsOwn: a replica that applies another replica's
// decisions (decoded for apply: header, two rows, one chain) reaches the
// keyspace, digest and active accounting of the replica that made them
// and applied its whole records; decisions remote and local, of prompts
// with a trailing partial block, the prefill row's overlap counted.
func TestPeerDecisionAppliesAsOwn(t *testing.T) {
	own, peer := perfHarness(t), perfHarness(t)
	ds := perfDecisions(300, 7, 1e18)
	recs := make([]*kgo.Record, len(ds))
	for i, d := range ds {
		recs[i] = own.record(d.GetDecodeWorker().GetWorkerId(), d)
		if err := recordLocal(own.s, d, recs[i]); err != nil {
			t.Fatal(err)
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
	own.s.Read(func(ov View) {
		peer.s.Read(func(pv View) {
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
