package statestore

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// BenchmarkApplyDecisionParts splits p, the CPU a replica spends on a
// peer's decision (docs/scaling.md), by what the record carries, on the
// apply path of today (decode for apply, active accounting, the decision
// and request keys in Pebble, offsets, flushes):
//
//   - whole: the record as the API writes it (160 candidate rows, the
//     watermark of 60 partitions, the prompt's chain of 64–2,048 blocks);
//   - no_table: without the rows, watermark, config and checks, which
//     only audit, explain and whatif read;
//   - no_table_chain256: also the chain cut to its first 256 blocks;
//   - no_table_no_chain: the facts of active accounting and the request
//     index alone;
//   - outcome: a completed outcome of each decision, applied after it.
//
// The parts are what a load-delta entry would carry (scaling.md, "Load
// deltas"); the fixed part of a record that a batch of entries shares is
// what no_table_no_chain costs over its bytes.
//
//	go test ./statestore -run '^$' -bench ApplyDecisionParts -benchtime 2000x
func BenchmarkApplyDecisionParts(b *testing.B) {
	strip := func(chain int) func(*pb.DecisionRecord) {
		return func(d *pb.DecisionRecord) {
			d.Candidates, d.Watermark, d.ConfigJson, d.EffIslCheck, d.RatioCheck = nil, nil, "", nil, nil
			if chain == 0 {
				d.Chains = nil
			} else if hs := d.Chains[0].BlockHashes; len(hs) > chain {
				d.Chains[0].BlockHashes = hs[:chain]
			}
		}
	}
	for _, c := range []struct {
		name string
		edit func(*pb.DecisionRecord)
	}{
		{"whole", func(*pb.DecisionRecord) {}},
		{"no_table", strip(1 << 30)},
		{"no_table_chain256", strip(256)},
		{"no_table_no_chain", strip(0)},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := perfHarness(b)
			ds := perfDecisions(b.N, 3, 1e18)
			recs := make([]*kgo.Record, len(ds))
			for i, d := range ds {
				c.edit(d)
				recs[i] = h.record(d.GetDecodeWorker().GetWorkerId(), d)
			}
			benchApply(b, h, recs)
		})
	}
	b.Run("outcome", func(b *testing.B) {
		h := perfHarness(b)
		ds := perfDecisions(b.N, 3, 1e18)
		var decs, outs []*kgo.Record
		for i, d := range ds {
			strip(256)(d)
			decs = append(decs, h.record(d.GetDecodeWorker().GetWorkerId(), d))
			outs = append(outs, h.record(d.GetDecodeWorker().GetWorkerId(), completedOutcome(d, i)))
		}
		for lo := 0; lo < len(decs); lo += 64 {
			h.apply(decs[lo:min(lo+64, len(decs))]...)
		}
		benchApply(b, h, outs)
	})
}
