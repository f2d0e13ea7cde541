package replay_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/replay"
)

// traceRecord is a decision of request req at ms after base, prompt tokens long,
// whose 16-token hash chain is blocks hashes (prefix k of hashes is the chain of
// the prompt's first 16·k tokens), with omitted blocks cut off.
func traceRecord(i int, req string, ms int64, prompt uint32, hashes []uint64, omitted uint32) *pb.DecisionRecord {
	return &pb.DecisionRecord{DecisionId: "01J0000000000000000000000" + string(rune('A'+i)), RequestId: req,
		Model: "m", PromptTokens: prompt, Mode: "local", DecodeWorker: &pb.WorkerRef{WorkerId: "d0"},
		BlockSize: 16, DecidedAtUnixNano: traceBase + ms*1e6, ReplicaId: "r", Policy: "isl_bounding",
		Chains: []*pb.HashChain{{BlockSize: 16, BlockHashes: hashes, OmittedBlocks: omitted}}}
}

const traceBase = int64(1_700_000_000_000_000_000)

// chainOf is a stand-in chain: block j of a prompt of family f is f<<32|j while the
// prompts agree, then diverge by salt.
func chainOf(f uint64, n, shared int, salt uint64) []uint64 {
	out := make([]uint64, n)
	for j := range out {
		out[j] = f<<32 | uint64(j)
		if j >= shared {
			out[j] |= salt << 48
		}
	}
	return out
}

// TestExportTrace: decisions with their outcomes become Mooncake lines in decision
// time order; hash_ids are dense, shared exactly where the chains agree through a
// 512-token segment, and stop where a chain was cut; a request without output
// tokens is skipped (or given the default), a duplicate request id keeps its
// earliest decision, a prompt past the context is dropped; the bytes do not depend
// on the read.
func TestExportTrace(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	names := events.Names{Prefix: prefix}
	// replaytest.Outcomes gives even-indexed records a terminal outcome with
	// 100+i output tokens, odd ones none.
	recs := []*pb.DecisionRecord{
		0: traceRecord(0, "a", 1000, 1040, chainOf(1, 65, 65, 0), 0),
		1: traceRecord(1, "b", 1500, 600, chainOf(2, 37, 37, 0), 0),
		2: traceRecord(2, "c", 3500, 1024, chainOf(1, 64, 32, 7), 0),   // shares a's first segment
		3: traceRecord(3, "a", 5000, 1040, chainOf(9, 65, 65, 0), 0),   // a later duplicate of a
		4: traceRecord(4, "e", 0, 100, chainOf(3, 6, 6, 0), 0),         // decided first
		6: traceRecord(6, "g", 6000, 2048, chainOf(4, 40, 40, 0), 88),  // chain cut after 640 tokens
		8: traceRecord(8, "i", 7000, 131000, chainOf(5, 10, 10, 0), 0), // + 108 output > 131072
	}
	for i, r := range recs {
		if r == nil {
			recs[i] = traceRecord(i, "pad"+string(rune('0'+i)), 8000, 16, chainOf(6+uint64(i), 1, 1, 0), 0)
		}
	}
	produceLog(t, brokers, names, recs)
	src := &replay.KafkaLog{Client: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Names: names}
	o := replay.TraceOptions{SegmentTokens: 512, MaxRequests: 100, MaxContext: 131072}
	export := func(o replay.TraceOptions) (string, replay.TraceStats) {
		var b bytes.Buffer
		st, err := replay.ExportTrace(context.Background(), src, &b, o)
		if err != nil {
			t.Fatal(err)
		}
		return b.String(), st
	}
	got, st := export(o)
	want := `{"timestamp": 0, "input_length": 100, "output_length": 104, "hash_ids": [0]}
{"timestamp": 1000, "input_length": 1040, "output_length": 100, "hash_ids": [1, 2, 3]}
{"timestamp": 3500, "input_length": 1024, "output_length": 102, "hash_ids": [1, 4]}
{"timestamp": 6000, "input_length": 2048, "output_length": 106, "hash_ids": [5]}
`
	if got != want {
		t.Fatalf("got\n%swant\n%s", got, want)
	}
	if st.Decisions != 9 || st.Written != 4 || st.Duplicates != 1 || st.NoOutput != 3 || st.TooLong != 1 || st.CutChains != 1 {
		t.Fatalf("stats %+v", st)
	}
	again, _ := export(o)
	if again != got {
		t.Fatal("a second export of the same window differs")
	}
	o.DefaultOutputTokens = 50
	withDefault, st := export(o)
	if !strings.Contains(withDefault, `{"timestamp": 1500, "input_length": 600, "output_length": 50, "hash_ids": [`) || st.Written != 7 {
		t.Fatalf("with a default output: %+v\n%s", st, withDefault)
	}
	o.MaxRequests = 3
	if _, err := replay.ExportTrace(context.Background(), src, &bytes.Buffer{}, o); err == nil || !strings.Contains(err.Error(), "more than 3 requests") {
		t.Fatalf("bound: %v", err)
	}
}
