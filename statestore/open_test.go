package statestore

import (
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// TestOpenRequestsMatchFacts: a store that holds the log's decisions as
// open requests (Options.PeerSums) holds the load a store applying the
// whole records holds, for a log in partition order: per worker the same
// active requests, prefill tokens and active blocks, the same matches and
// the same latency model.
func TestOpenRequestsMatchFacts(t *testing.T) {
	whole, open := perfHarness(t), perfHarnessWith(t, Options{Source: SourceLoadDeltas, PeerSums: true})
	ds := perfDecisions(300, 7, 1e18)
	withLatencyFeatures(ds, rand.New(rand.NewPCG(7, 5)))
	cutChains(ds, events.MaxDeltaHashes)
	var wr, or []*kgo.Record
	for i, d := range ds {
		key := d.GetDecodeWorker().GetWorkerId()
		wr = append(wr, whole.record(key, d))
		or = append(or, open.record(key, deltaOf(d)))
		var o *pb.OutcomeEvent
		switch i % 4 {
		case 0:
			o = completedOutcome(d, i)
		case 1:
			o = &pb.OutcomeEvent{RequestId: d.GetRequestId(), DecisionId: d.GetDecisionId(), DecodeWorker: d.GetDecodeWorker(),
				Kind: pb.OutcomeEvent_KIND_PREFILL_DONE, EventTimeUnixNano: d.GetDecidedAtUnixNano() + 5e5}
		case 2:
			o = completedOutcome(d, i)
			o.DecisionId = "" // names the request only
		}
		if o != nil {
			wr = append(wr, whole.record(key, o))
			or = append(or, open.record(key, deltaOf(o)))
		}
	}
	for lo := 0; lo < len(wr); lo += 64 {
		whole.apply(wr[lo:min(lo+64, len(wr))]...)
	}
	for lo := 0; lo < len(or); lo += 50 {
		open.apply(or[lo:min(lo+50, len(or))]...)
	}
	compareLoad(t, whole.s, open.s, ds, true)
	open.s.Read(func(View) {
		ended, held := 0, 0
		for _, e := range open.s.st.act.entries {
			if e.flags&fTerminal != 0 {
				ended++
				if e.chain != nil || e.onDecode {
					held++
				}
			}
		}
		if ended == 0 || held > 0 {
			t.Fatalf("%d ended requests, %d of them still carrying blocks", ended, held)
		}
	})
}
