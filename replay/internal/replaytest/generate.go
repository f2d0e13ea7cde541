// Package replaytest generates decision records with the real decider, for
// the replay package's tests and for the export fixture the Python check
// reads. Nothing in it is used by pdrouter itself.
package replaytest

import (
	"fmt"
	"math/rand/v2"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/decider/memview"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/replay"
)

// Case is one generated decision with the state it was made from, so a
// test can decide it again directly, without the record.
type Case struct {
	View *memview.View
	Req  *decider.Request
	Rec  *pb.DecisionRecord
}

// Base is the event time of the first generated decision (Unix ns); the
// i-th is decided at Base + i ms.
const Base = int64(1_780_000_000_000_000_000)

// Generate makes n decisions with the real decider, each on a state of its
// own: 4 decode and 2 prefill workers with random loads, and, for 85 % of
// the requests (conversations that continue), 30 to 100 % of the prompt
// cached on one or two decode workers, sometimes only in host memory.
// Prompts are 1 to 8192 tokens, so effective ISLs and ratios spread over
// their whole range. Records are built as the API builds them (replay's
// TestRecordedDecisionsReproduceByteForByte checks that replay.RecordOf
// agrees with the API on real records).
func Generate(n int, seed uint64, cfg decider.Config) ([]Case, error) {
	dc, err := decider.New(cfg)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]Case, 0, n)
	for i := 0; i < n; i++ {
		v := memview.New()
		for w := 0; w < 4; w++ {
			id := fmt.Sprintf("decode-%d", w)
			v.Add(decider.WorkerInfo{ID: id, Pool: decider.PoolDecode, Model: "m", BlockSize: 16, TotalKVBlocks: 8000})
			a := decider.ActiveLoad{DecodeBlocks: rng.Int64N(400), PrefillTokens: rng.Int64N(4000)}
			a.RecentRequests = a.PrefillTokens % 50 // derived, so the draws of other fields stay as they were
			v.SetActive(id, a)
			v.SetLoad(id, decider.LoadSample{KVUsedBlocks: rng.Int64N(7000), ActivePrefillTokens: rng.Int64N(4000)})
		}
		for w := 0; w < 2; w++ {
			id := fmt.Sprintf("prefill-%d", w)
			v.Add(decider.WorkerInfo{ID: id, Pool: decider.PoolPrefill, Model: "m", BlockSize: 16, MaxNumBatchedTokens: 8192})
			a := decider.ActiveLoad{PrefillTokens: rng.Int64N(16000)}
			a.RecentRequests = a.PrefillTokens % 80
			v.SetActive(id, a)
			v.SetLoad(id, decider.LoadSample{ActivePrefillTokens: rng.Int64N(8192)})
		}
		p := 1 + rng.Int64N(8192)
		chain := make([]uint64, p/16)
		for b := range chain {
			chain[b] = uint64(i+1)<<32 | uint64(b+1)
		}
		holders := 0
		if rng.IntN(100) < 85 {
			holders = 1 + rng.IntN(2)
		}
		for k := holders; k > 0 && len(chain) > 0; k-- {
			w := fmt.Sprintf("decode-%d", rng.IntN(4))
			held := len(chain) * (30 + rng.IntN(71)) / 100
			tier := memview.Device
			if rng.IntN(4) == 0 {
				tier = memview.Host
			}
			v.Store(w, tier, chain[:held]...)
		}
		req := &decider.Request{ID: fmt.Sprintf("req-%05d", i), Model: "m", PromptTokens: p, Chains: []decider.Chain{{BlockSize: 16, Hashes: chain}}}
		d, err := dc.Decide(v, req)
		if err != nil {
			return nil, err
		}
		meta := &pb.DecisionRecord{
			DecisionId: fmt.Sprintf("dec-%05d", i), DecidedAtUnixNano: Base + int64(i)*1e6, ReplicaId: "router-gen",
			DeciderVersion: replay.DeciderVersion, ConfigJson: string(cfg.CanonicalJSON()), RequestDigest: uint64(i) * 0x9e3779b97f4a7c15,
			Watermark: &pb.Watermark{Topics: []*pb.TopicOffsets{{Topic: "kv-events", Partitions: []*pb.PartitionOffset{{Partition: 0, Offset: int64(i)}}}}},
			Chains:    []*pb.HashChain{{BlockSize: 16, BlockHashes: chain}},
		}
		out = append(out, Case{View: v, Req: req, Rec: replay.RecordOf(d, meta)})
	}
	return out, nil
}

// Outcomes returns the outcome events of a generated window: for every
// other decision a prefill_done with a TTFT 5 ms after the decision, then a
// completed (cancelled for every seventh) 900 ms after it.
func Outcomes(recs []*pb.DecisionRecord) []*pb.OutcomeEvent {
	var out []*pb.OutcomeEvent
	for i, rec := range recs {
		if i%2 == 1 {
			continue
		}
		at := rec.GetDecidedAtUnixNano()
		ttft := 10 + float64(i%97)
		out = append(out, &pb.OutcomeEvent{RequestId: rec.GetRequestId(), DecisionId: rec.GetDecisionId(),
			Kind: pb.OutcomeEvent_KIND_PREFILL_DONE, DecodeWorker: rec.GetDecodeWorker(), EventTimeUnixNano: at + 5e6, TtftMs: &ttft})
		kind := pb.OutcomeEvent_KIND_COMPLETED
		if i%7 == 0 {
			kind = pb.OutcomeEvent_KIND_CANCELLED
		}
		n, itl := uint64(100+i), 20+float64(i%13)/4
		out = append(out, &pb.OutcomeEvent{RequestId: rec.GetRequestId(), DecisionId: rec.GetDecisionId(),
			Kind: kind, DecodeWorker: rec.GetDecodeWorker(), EventTimeUnixNano: at + 9e8, OutputTokens: &n, ItlMsMean: &itl})
	}
	return out
}
