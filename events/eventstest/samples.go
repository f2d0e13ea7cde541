// Package eventstest holds sample records of every schema, for tests in any
// package: round trips through Kafka, golden files, size measurements.
package eventstest

import (
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Sample is a named example record.
type Sample struct {
	Name string
	Key  []byte
	Msg  proto.Message
}

func u64(v uint64) *uint64 { return &v }
func i64(v int64) *int64   { return &v }
func i32(v int32) *int32   { return &v }
func f64(v float64) *float64 {
	return &v
}

// Tokens returns n token ids starting at start.
func Tokens(n int, start uint32) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = start + uint32(i)*7919%128000
	}
	return t
}

// OneBlockStored is the smallest useful KV record: one BlockStored of one
// 16-token block, normalized, without raw bytes. It is the unit the
// bytes-per-record figure in the README is measured on.
func OneBlockStored() *pb.KvEventRecord {
	return &pb.KvEventRecord{
		Worker:            &pb.WorkerRef{WorkerId: "decode-1"},
		EventTimeUnixNano: 1764400000250000000,
		Source:            &pb.KvSource{Engine: pb.Engine_ENGINE_VLLM, Seq: u64(12345)},
		Events: []*pb.KvEvent{{Event: &pb.KvEvent_Stored{Stored: &pb.BlockStored{
			BlockHashes:     []uint64{0x9a3c1e55d2f07b41},
			ParentBlockHash: u64(0x11d0c2e8a7b3f945),
			TokenIds:        Tokens(16, 1000),
			BlockSize:       16,
			Tier:            pb.Tier_TIER_DEVICE,
			Medium:          "GPU",
		}}}},
	}
}

// Decision returns a decision record with a candidate table of n decode and
// m prefill workers and a chain of blocks hashes.
func Decision(n, m, blocks int) *pb.DecisionRecord {
	d := &pb.DecisionRecord{
		DecisionId: "01JDX3Q8W6ZK2M4N5P6R7S8T9V", RequestId: "r-123", RequestDigest: 0x5ee0c0ffee,
		Model: "llama-3-70b", PromptTokens: 5000, ExpectedOutputTokens: 256,
		Mode: "local", DecodeWorker: &pb.WorkerRef{WorkerId: "decode-1"},
		Reason: string(decider.ReasonAllowedGateDisabled), CachedTokens: 4096, EffectiveIsl: 904, EffectiveIslRatio: 0.1808,
		Policy: string(decider.PolicyISLBounding), ConfigHash: "3f2a9c0d1e4b5a69",
		ConfigJson: `{"policy":"isl_bounding","eff_isl_threshold":2048,"eff_isl_ratio_threshold":0.7}`,
		Watermark: &pb.Watermark{Topics: []*pb.TopicOffsets{
			{Topic: "kv-events", Partitions: []*pb.PartitionOffset{{Partition: 0, Offset: 125}, {Partition: 1, Offset: 88}}},
			{Topic: "load", Partitions: []*pb.PartitionOffset{{Partition: 0, Offset: 40}}},
		}},
		BlockSize: 16, PolicyBypass: true, DecidedBy: "eff_isl_threshold", Distance: -1144,
		EffIslCheck:       &pb.Check{Name: "eff_isl_threshold", Evaluated: true, Known: true, Value: 904, Limit: 2048, Hit: true},
		RatioCheck:        &pb.Check{Name: "eff_isl_ratio_threshold", Evaluated: true, Known: true, Value: 0.1808, Limit: 0.7, Hit: true},
		PrefillBusyCheck:  &pb.Check{Name: "prefill_busy_threshold"},
		DecodeBusyCheck:   &pb.Check{Name: "decode_busy_threshold"},
		DecidedAtUnixNano: 1764400001000000000, ReplicaId: "router-0", DeciderVersion: 1,
	}
	cand := func(i int, pool pb.Pool, prefix string) *pb.Candidate {
		return &pb.Candidate{
			Worker: &pb.WorkerRef{WorkerId: prefix + "-" + string(rune('a'+i%26)) + string(rune('0'+i/26))}, Pool: pool,
			Eligible: true, BlockSize: 16, OverlapBlocks: uint32(256 - i), HostBlocks: 2, ActivePrefillTokens: int64(64 * i),
			RawPrefillBlocks: 312.5, OverlapCredit: 257.5, PrefillTerm: 55,
			ActiveDecodeBlocks: int64(1000 + i), RequestBlocks: 312, SharedActiveBlocks: 12, PotentialDecodeBlocks: int64(1300 + i),
			Cost: 1355 + float64(i), TieHash: 0xabcdef0123456789 ^ uint64(i), TotalKvBlocks: 16384, MaxNumBatchedTokens: 8192,
			LoadKnown: true, LoadKvUsedBlocks: 9000, LoadPrefillTokens: 4096, Picked: i == 0,
		}
	}
	for i := 0; i < n; i++ {
		d.Candidates = append(d.Candidates, cand(i, pb.Pool_POOL_DECODE, "decode"))
	}
	for i := 0; i < m; i++ {
		d.Candidates = append(d.Candidates, cand(i, pb.Pool_POOL_PREFILL, "prefill"))
	}
	if blocks > 0 {
		c := &pb.HashChain{BlockSize: 16}
		for i := 0; i < blocks; i++ {
			c.BlockHashes = append(c.BlockHashes, 0x9e3779b97f4a7c15*uint64(i+1))
		}
		d.Chains = []*pb.HashChain{c}
	}
	return d
}

// All returns one sample of every schema and every KV event kind.
func All() []Sample {
	kv := OneBlockStored()
	kv.Raw = &pb.RawPayload{Format: pb.RawFormat_RAW_FORMAT_VLLM_MSGPACK, Payload: []byte{0x93, 0xcb, 0x41, 0xda, 0x4c, 0x4e, 0x00, 0x00, 0x00, 0x00, 0x90, 0x00}}
	kv.Source.Endpoint, kv.Source.Topic, kv.Source.Epoch, kv.Source.IngestId = "tcp://10.0.0.5:5557", "kv@10.0.0.5@llama", 2, "ingest-0"
	kv.Events = append(kv.Events,
		&pb.KvEvent{Event: &pb.KvEvent_Stored{Stored: &pb.BlockStored{
			BlockHashes: []uint64{1, 2}, TokenIds: Tokens(32, 5), BlockSize: 16, Tier: pb.Tier_TIER_HOST,
			Medium: "CPU", LoraId: i64(3), LoraName: "sql-adapter", GroupIdx: i32(0),
		}}},
		&pb.KvEvent{Event: &pb.KvEvent_Removed{Removed: &pb.BlockRemoved{BlockHashes: []uint64{1}, Tier: pb.Tier_TIER_HOST, Medium: "CPU"}}},
		&pb.KvEvent{Event: &pb.KvEvent_Cleared{Cleared: &pb.AllBlocksCleared{}}},
		&pb.KvEvent{Event: &pb.KvEvent_Unknown{Unknown: &pb.UnknownEvent{Tag: "BlockInactive"}}},
		&pb.KvEvent{Event: &pb.KvEvent_SourceReset{SourceReset: &pb.SourceReset{
			Reason: pb.SourceReset_REASON_SEQUENCE_RESTART, LastSeq: 12345, NextSeq: 0, Detail: "seq went from 12345 to 0"}}},
	)
	return []Sample{
		{"kv-events", []byte("decode-1"), kv},
		{"load", []byte("decode-1"), &pb.LoadSample{
			Worker: &pb.WorkerRef{WorkerId: "decode-1", DpRank: 1}, SampleTimeUnixNano: 1764400000500000000,
			NumRequestsRunning: u64(12), NumRequestsWaiting: u64(3), KvUsedBlocks: u64(9000), KvTotalBlocks: u64(16384),
			ActivePrefillTokens: u64(4096), KvUsageRatio: f64(0.549), Origin: "scrape"}},
		{"workers", []byte("decode-1"), &pb.WorkerRegistration{
			WorkerId: "decode-1", Pool: pb.Pool_POOL_DECODE, Model: "llama-3-70b", BlockSize: 16,
			TotalKvBlocks: u64(16384), MaxNumBatchedTokens: u64(8192), KvEventsEndpoint: "tcp://10.0.0.5:5557",
			KvReplayEndpoint: "tcp://10.0.0.5:5558", KvEventsTopic: "kv@10.0.0.5@llama", MetricsUrl: "http://10.0.0.5:8000/metrics",
			DpSize: 2, Engine: pb.Engine_ENGINE_VLLM, RegisteredAtUnixNano: 1764400000000000000}},
		{"decisions", []byte("decode-1"), Decision(3, 2, 8)},
		{"outcomes", []byte("decode-1"), &pb.OutcomeEvent{
			RequestId: "r-123", DecisionId: "01JDX3Q8W6ZK2M4N5P6R7S8T9V", Kind: pb.OutcomeEvent_KIND_COMPLETED,
			DecodeWorker: &pb.WorkerRef{WorkerId: "decode-1"}, PrefillWorker: &pb.WorkerRef{WorkerId: "prefill-2"},
			EventTimeUnixNano: 1764400009000000000, TtftMs: f64(182.5), OutputTokens: u64(311), ItlMsMean: f64(21.4)}},
		{"load-deltas", []byte("decode-1"), &pb.LoadDelta{WriterId: "router-0",
			Decisions: []*pb.DecisionDelta{{
				DecisionId: "01JDX3Q8W6ZK2M4N5P6R7S8T9V", RequestId: "r-123", DecidedAtUnixNano: 1764400000000000000,
				DecodeWorker: &pb.WorkerRef{WorkerId: "decode-1"}, PrefillWorker: &pb.WorkerRef{WorkerId: "prefill-2"},
				BlockSize: 16, PromptTokens: 4100, EffectiveIsl: 3076, PrefillCachedTokens: 1024,
				ActiveHashes: []uint64{0x1f2e3d4c5b6a7988, 0x8877665544332211}, LatencyPath: 1,
				LatencyInputs: []uint32{3076, 1, 0, 12, 9000, 4096, 3076, 549, 0}}},
			Lifecycle: []*pb.LifecycleDelta{{
				DecisionId: "01JDX3Q8W6ZK2M4N5P6R7S8T9V", RequestId: "r-123", Kind: pb.OutcomeEvent_KIND_COMPLETED,
				EventTimeUnixNano: 1764400009000000000, DecodeWorker: &pb.WorkerRef{WorkerId: "decode-1"},
				TtftMs: f64(182.5), ItlMsMean: f64(21.4), OutputTokens: u64(311)}}}},
		{"load-shares", []byte("router-0"), &pb.LoadShares{WriterId: "router-0", Seq: 1764400000000000042,
			ClockUnixNano: 1764400009000000000, Shares: []*pb.WorkerShare{
				{Worker: &pb.WorkerRef{WorkerId: "decode-1", DpRank: 1}, DecodeBlocks: 257, Requests: 1, RecentDecisions: 1},
				{Worker: &pb.WorkerRef{WorkerId: "prefill-2"}, PrefillTokens: 3076, RecentDecisions: 1}}}},
		{"forwards", []byte("r-123"), &pb.ForwardedEvent{RequestId: "r-123", Kind: pb.OutcomeEvent_KIND_COMPLETED,
			TtftMs: f64(182.5), OutputTokens: u64(311), ItlMsMean: f64(21.4), EventTimeUnixNano: 1764400009000000000,
			ForwardedBy: "router-1"}},
	}
}

// Side returns one sample of every side schema (a message a topic carries
// next to its main one, events.SideSchemas), named "topic.Message".
func Side() []Sample {
	return []Sample{
		{"load.WorkerHealth", []byte("decode-1"), &pb.WorkerHealth{
			WorkerId: "decode-1", Healthy: false, Reason: pb.HealthReason_HEALTH_REASON_SCRAPE_FAILED,
			Source: pb.HealthSource_HEALTH_SOURCE_INGEST_SCRAPE, ObservedAtUnixNano: 1764400002000000000,
			Detail: "scrape failed 2 times in a row: dial tcp 10.0.0.5:8000: connect: connection refused", Observer: "ingest-0"}},
	}
}
