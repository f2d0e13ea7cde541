package events_test

import (
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
)

// varied returns n distinct records like m, with random hashes, token ids
// and cost terms, so a compressed batch is not flattered by repetition.
func varied(m proto.Message, n int) []proto.Message {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]proto.Message, n)
	for i := range out {
		c := proto.Clone(m)
		switch v := c.(type) {
		case *pb.KvEventRecord:
			s := v.Events[0].GetStored()
			s.BlockHashes[0], *s.ParentBlockHash = rng.Uint64(), rng.Uint64()
			for j := range s.TokenIds {
				s.TokenIds[j] = rng.Uint32N(128000)
			}
			v.EventTimeUnixNano += int64(i) * 1e6
		case *pb.DecisionRecord:
			for _, cand := range v.Candidates {
				cand.OverlapBlocks = rng.Uint32N(1000)
				cand.ActiveDecodeBlocks = rng.Int64N(16384)
				cand.Cost = rng.Float64() * 2000
				cand.PrefillTerm = rng.Float64() * 1000
				cand.TieHash = rng.Uint64()
			}
			for _, ch := range v.Chains {
				for j := range ch.BlockHashes {
					ch.BlockHashes[j] = rng.Uint64()
				}
			}
		}
		out[i] = c
	}
	return out
}

// BenchmarkRecordBytes measures the encoded size of the records whose size
// drives Kafka and disk sizing:
//
//	go test ./events -run '^$' -bench RecordBytes -benchtime 100x
//
// value-B/record is the protobuf value; header-B/record the pdr-schema
// header; zstd-B/record the value's share of a zstd batch of 100 distinct
// records, as franz-go compresses batches on the wire.
func BenchmarkRecordBytes(b *testing.B) {
	cases := []struct {
		name string
		msg  proto.Message
	}{
		{"kv_one_block_stored", eventstest.OneBlockStored()},
		{"decision_4dec_2pre_no_chain", eventstest.Decision(4, 2, 0)},
		{"decision_128dec_32pre_no_chain", eventstest.Decision(128, 32, 0)},
		{"decision_128dec_32pre_1000blocks", eventstest.Decision(128, 32, 1000)},
	}
	enc, _ := zstd.NewWriter(nil)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var r []byte
			for b.Loop() {
				var err error
				if r, err = events.Marshal(c.msg); err != nil {
					b.Fatal(err)
				}
			}
			var batch []byte
			for _, m := range varied(c.msg, 100) {
				v, _ := events.Marshal(m)
				batch = append(batch, v...)
			}
			t, _ := events.TopicOf(c.msg)
			b.ReportMetric(float64(len(r)), "value-B/record")
			b.ReportMetric(float64(len(events.HeaderSchema)+len(events.SchemaOf(t))), "header-B/record")
			b.ReportMetric(float64(len(enc.EncodeAll(batch, nil)))/100, "zstd-B/record")
		})
	}
}

// TestOneBlockStoredIsCompact guards the size of the most frequent record: a
// regression (say, token ids as fixed32) would double Kafka's volume.
func TestOneBlockStoredIsCompact(t *testing.T) {
	v, err := events.Marshal(eventstest.OneBlockStored())
	if err != nil {
		t.Fatal(err)
	}
	// 16 token ids of a 128k vocabulary take 3 bytes each as varints, the
	// two hashes 9 each; worker, time, source and tier framing add the rest.
	if len(v) > 128 {
		t.Fatalf("one-block BlockStored is %d bytes, want at most 128", len(v))
	}
	t.Logf("one-block BlockStored value: %d bytes", len(v))
}
