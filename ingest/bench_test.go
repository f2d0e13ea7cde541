package ingest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

func BenchmarkDecodeBatchOneBlock(b *testing.B) {
	payloads, _ := loadVectors(b)
	p := payloads["map_BlockStored_batch"]
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeBatch(p, pb.Engine_ENGINE_VLLM); err != nil {
			b.Fatal(err)
		}
	}
}

// recordSink is the Kafka sink without the client: it builds every record
// as KafkaSink does (validate, encode) and drops it.
type recordSink struct {
	ks    *KafkaSink
	bytes int
}

func (r *recordSink) Produce(_ context.Context, key []byte, m proto.Message) error {
	recs, err := r.ks.records(context.Background(), key, m)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		r.bytes += len(rec.Value)
	}
	return nil
}

// BenchmarkMessagePath is ingest's work per engine message after the
// socket: decode a batch of one-block events, sequence it, build and encode
// its Kafka record (everything but the socket and the Kafka client).
func BenchmarkMessagePath(b *testing.B) {
	for _, k := range []int{1, 32} {
		b.Run(fmt.Sprintf("events=%d", k), func(b *testing.B) {
			payload := oneBlockBatch(b, k, 1)
			m := NewMetrics(nil)
			sink := &recordSink{ks: NewKafkaSink(nil, events.Names{}, m, quietLog())}
			src := newSource(sourceSpec{Worker: "bench", Engine: pb.Engine_ENGINE_VLLM, Endpoint: "tcp://127.0.0.1:1"},
				sourceDeps{sink: sink, metrics: m, log: quietLog(), ingestID: "bench"})
			ctx := context.Background()
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			var seq uint64
			for b.Loop() {
				in := decodeInbound(received{msg: Message{Seq: seq, Payload: payload}, at: time.Now()}, pb.Engine_ENGINE_VLLM)
				if err := src.handle(ctx, in); err != nil {
					b.Fatal(err)
				}
				seq++
			}
			b.ReportMetric(float64(k)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// oneBlockBatch is a map-encoded batch of k one-block BlockStored events.
func oneBlockBatch(t testing.TB, k int, first uint64) []byte {
	evs := make([]any, k)
	for i := range evs {
		evs[i] = map[string]any{"type": "BlockStored", "block_hashes": []any{first + uint64(i)}, "parent_block_hash": nil,
			"token_ids": ints(i*16, 16), "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil}
	}
	return mp(t, []any{1757500000.25, evs, 0})
}
