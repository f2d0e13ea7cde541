package events

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
)

var generic = proto.MarshalOptions{Deterministic: true}

// randomDecision fills every field of a decision record, each left at its
// zero value a third of the time, with the values that encode unusually:
// -0, NaN and infinities, negative int64 and int32, the largest uint32,
// empty and non-ASCII strings, nil and empty nested messages.
func randomDecision(rng *rand.Rand) *pb.DecisionRecord {
	zero := func() bool { return rng.IntN(3) == 0 }
	str := func() string {
		if zero() {
			return ""
		}
		return []string{"a", "decode-7", "ünïcode ✓", string(make([]byte, 200))}[rng.IntN(4)]
	}
	u32 := func() uint32 {
		if zero() {
			return 0
		}
		return []uint32{1, 127, 128, 16383, 16384, math.MaxUint32}[rng.IntN(6)]
	}
	i64 := func() int64 {
		if zero() {
			return 0
		}
		return []int64{1, -1, math.MinInt64, math.MaxInt64, 300}[rng.IntN(5)]
	}
	f64 := func() float64 {
		if zero() {
			return 0
		}
		return []float64{math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1), 0.5, -1e300}[rng.IntN(6)]
	}
	u64 := func() uint64 {
		if zero() {
			return 0
		}
		return rng.Uint64()
	}
	ref := func() *pb.WorkerRef {
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			return &pb.WorkerRef{}
		}
		return &pb.WorkerRef{WorkerId: str(), DpRank: u32()}
	}
	check := func() *pb.Check {
		if zero() {
			return nil
		}
		return &pb.Check{Name: str(), Evaluated: !zero(), Known: !zero(), Value: f64(), Limit: f64(), Hit: !zero(), Note: str()}
	}
	d := &pb.DecisionRecord{
		DecisionId: str(), RequestId: str(), RequestDigest: u64(), Model: str(), LoraName: str(),
		PromptTokens: u32(), ExpectedOutputTokens: u32(), Mode: str(), DecodeWorker: ref(), PrefillWorker: ref(),
		Reason: str(), CachedTokens: u32(), EffectiveIsl: u32(), EffectiveIslRatio: f64(), Policy: str(),
		ConfigHash: str(), ConfigJson: str(), BlockSize: u32(), PolicyBypass: !zero(), DecidedBy: str(),
		Distance: f64(), EffIslCheck: check(), RatioCheck: check(), PrefillBusyCheck: check(), DecodeBusyCheck: check(),
		DecidedAtUnixNano: i64(), ReplicaId: str(), DeciderVersion: u32(), RetryOfDecisionId: str(),
	}
	if !zero() {
		d.Slo = &pb.SloPrediction{Evaluated: !zero(), Warm: !zero(), Samples: i64(), SloTtftMs: f64(), SloItlMs: f64(),
			LocalTtftMs: f64(), LocalItlMs: f64(), RemoteTtftMs: f64(), RemoteItlMs: f64(), RunningRequests: i64(),
			OthersItlMs: f64(), OthersBaseItlMs: f64(), LocalGoodput: f64(), RemoteGoodput: f64(), Margin: f64()}
		if !zero() {
			d.Slo.Fit = &pb.LatencyFit{}
			for range rng.IntN(5) {
				d.Slo.Fit.Samples = append(d.Slo.Fit.Samples, i64())
				d.Slo.Fit.Sigma = append(d.Slo.Fit.Sigma, f64())
				d.Slo.Fit.Coef = append(d.Slo.Fit.Coef, f64())
			}
		}
	}
	if !zero() {
		d.Watermark = &pb.Watermark{}
		for range rng.IntN(3) {
			t := &pb.TopicOffsets{Topic: str()}
			for range rng.IntN(3) {
				t.Partitions = append(t.Partitions, &pb.PartitionOffset{Partition: int32(i64()), Offset: i64()})
			}
			d.Watermark.Topics = append(d.Watermark.Topics, t)
		}
	}
	for range rng.IntN(5) {
		d.Candidates = append(d.Candidates, &pb.Candidate{
			Worker: ref(), Pool: pb.Pool(rng.IntN(3)), Eligible: !zero(), Excluded: str(), BlockSize: u32(),
			OverlapBlocks: u32(), HostBlocks: u32(), DiskBlocks: u32(), ActivePrefillTokens: i64(),
			RawPrefillBlocks: f64(), OverlapCredit: f64(), PrefillTerm: f64(), ActiveDecodeBlocks: i64(),
			RequestBlocks: i64(), SharedActiveBlocks: i64(), PotentialDecodeBlocks: i64(), Cost: f64(),
			TieHash: u64(), Probability: f64(), TotalKvBlocks: i64(), MaxNumBatchedTokens: i64(),
			LoadKnown: !zero(), LoadKvUsedBlocks: i64(), LoadPrefillTokens: i64(), Picked: !zero(),
			ActiveRequests: i64(), RecentLocalPrefill: i64(),
		})
	}
	for range rng.IntN(3) {
		c := &pb.HashChain{BlockSize: u32(), OmittedBlocks: u32()}
		for range rng.IntN(40) {
			c.BlockHashes = append(c.BlockHashes, rng.Uint64())
		}
		d.Chains = append(d.Chains, c)
	}
	switch rng.IntN(3) {
	case 1:
		d.OmittedCandidates = &pb.OmittedCandidates{}
	case 2:
		d.OmittedCandidates = &pb.OmittedCandidates{Decode: u32(), Prefill: u32(), Eligible: u32()}
	}
	return d
}

// decisionCorpus is the empty record, the samples and n random records.
func decisionCorpus(rng *rand.Rand, n int) []*pb.DecisionRecord {
	records := []*pb.DecisionRecord{{}, eventstest.Decision(4, 2, 0), eventstest.Decision(128, 32, 1000)}
	for range n {
		records = append(records, randomDecision(rng))
	}
	return records
}

// TestDecisionWireMatchesProto: the hand-written encoder yields exactly the
// generic encoder's bytes, on random records and on the sample ones.
func TestDecisionWireMatchesProto(t *testing.T) {
	records := decisionCorpus(rand.New(rand.NewPCG(3, 5)), 5000)
	for i, d := range records {
		want, err := generic.Marshal(d)
		if err != nil {
			t.Fatalf("record %d: generic encoder: %v", i, err)
		}
		got, ok := appendDecision(nil, d, wholeDecision)
		if !ok {
			t.Fatalf("record %d: the hand-written encoder declined a plain record", i)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("record %d: hand-written encoding differs from the generic one\n got %x\nwant %x\nrecord %v", i, got, want, d)
		}
		if m, err := Marshal(d); err != nil || !bytes.Equal(m, want) {
			t.Fatalf("record %d: Marshal differs from the generic encoder (err %v)", i, err)
		}
	}
}

// TestDecisionWireLeavesTheRestToProto: what the hand-written encoder
// cannot encode exactly goes to the generic encoder, which keeps unknown
// fields and rejects invalid UTF-8 with its own error.
func TestDecisionWireLeavesTheRestToProto(t *testing.T) {
	withUnknown := eventstest.Decision(4, 2, 10)
	withUnknown.Candidates[1].ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7))
	badUTF8 := eventstest.Decision(4, 2, 0)
	badUTF8.Candidates[0].Worker.WorkerId = "\xff"
	nilRow := eventstest.Decision(4, 2, 0)
	nilRow.Candidates[2] = nil
	omittedUnknown := eventstest.Decision(4, 2, 0)
	omittedUnknown.OmittedCandidates = &pb.OmittedCandidates{Decode: 3}
	omittedUnknown.OmittedCandidates.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))
	for name, d := range map[string]*pb.DecisionRecord{"unknown field": withUnknown, "invalid UTF-8": badUTF8, "nil row": nilRow,
		"unknown field in omitted_candidates": omittedUnknown} {
		if _, ok := appendDecision(nil, d, wholeDecision); ok {
			t.Errorf("%s: the hand-written encoder took a record it cannot encode exactly", name)
		}
	}
	got, err := Marshal(withUnknown)
	want, _ := generic.Marshal(withUnknown)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("unknown fields: Marshal %x, %v; want the generic encoding %x", got, err, want)
	}
	if _, err := Marshal(badUTF8); err == nil {
		t.Fatal("invalid UTF-8 was encoded; the generic encoder rejects it")
	}
}

// BenchmarkDecisionMarshal: a decision of a 128 decode + 32 prefill fleet
// with a 1,000-block chain, by the generic and the hand-written encoder,
// and its header alone (what a replica stores, MarshalDecisionHeader).
func BenchmarkDecisionMarshal(b *testing.B) {
	d := eventstest.Decision(128, 32, 1000)
	b.Run("generic", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = generic.Marshal(d)
		}
	})
	b.Run("handwritten", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = Marshal(d)
		}
	})
	b.Run("header", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = MarshalDecisionHeader(d, false)
		}
	})
}
