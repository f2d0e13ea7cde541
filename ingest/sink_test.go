package ingest

import (
	"bytes"
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// TestKafkaSinkRecordSize: a kv-events record over MaxRecordBytes is
// written without its raw payload (events kept); one under it keeps its
// bytes; one over events.MaxValueBytes is written stripped too, not
// refused.
func TestKafkaSinkRecordSize(t *testing.T) {
	ks := NewKafkaSink(nil, events.Names{}, NewMetrics(nil), quietLog())
	ks.MaxRecordBytes = 1000
	rec := func(raw int) *pb.KvEventRecord {
		seq := uint64(7)
		return &pb.KvEventRecord{
			Worker:            &pb.WorkerRef{WorkerId: "w"},
			EventTimeUnixNano: 1,
			Source:            &pb.KvSource{Engine: pb.Engine_ENGINE_VLLM, Endpoint: "tcp://e:1", Seq: &seq},
			Raw:               &pb.RawPayload{Format: pb.RawFormat_RAW_FORMAT_VLLM_MSGPACK, Payload: bytes.Repeat([]byte{0xc0}, raw)},
			Events:            []*pb.KvEvent{{Event: &pb.KvEvent_Cleared{Cleared: &pb.AllBlocksCleared{}}}},
		}
	}
	for _, tc := range []struct {
		raw     int
		keepRaw bool
	}{{100, true}, {2000, false}, {events.MaxValueBytes + 1, false}} {
		m := rec(tc.raw)
		recs, err := ks.records(context.Background(), events.WorkerKey("w"), m)
		if err != nil {
			t.Fatalf("raw %d: %v", tc.raw, err)
		}
		if len(recs) != 1 {
			t.Fatalf("raw %d: %d records, want 1", tc.raw, len(recs))
		}
		r := recs[0]
		var got pb.KvEventRecord
		if err := proto.Unmarshal(r.Value, &got); err != nil {
			t.Fatal(err)
		}
		if kept := len(got.GetRaw().GetPayload()) == tc.raw; kept != tc.keepRaw || len(got.GetEvents()) != 1 {
			t.Errorf("raw %d: kept raw %v, want %v; %d events", tc.raw, kept, tc.keepRaw, len(got.GetEvents()))
		}
		if len(m.GetRaw().GetPayload()) != tc.raw {
			t.Errorf("raw %d: the caller's record was changed", tc.raw)
		}
	}
}
