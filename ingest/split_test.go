package ingest

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

func splitFixture(blocks, nRemoved int) *pb.KvEventRecord {
	seq := uint64(9)
	tokens := make([]uint32, blocks*16)
	for i := range tokens {
		tokens[i] = uint32(i*7919%150000 + 1000)
	}
	hashes := make([]uint64, blocks)
	for i := range hashes {
		hashes[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	gone := make([]uint64, nRemoved)
	for i := range gone {
		gone[i] = uint64(i) + 1<<40
	}
	return &pb.KvEventRecord{
		Worker:            &pb.WorkerRef{WorkerId: "decode-1", DpRank: 1},
		EventTimeUnixNano: 5,
		Source:            &pb.KvSource{Engine: pb.Engine_ENGINE_VLLM, Endpoint: "tcp://e:1", Seq: &seq},
		Raw:               &pb.RawPayload{Format: pb.RawFormat_RAW_FORMAT_VLLM_MSGPACK, Payload: make([]byte, 50_000)},
		Events: []*pb.KvEvent{
			removed(&pb.BlockRemoved{BlockHashes: gone, Medium: "GPU"}),
			stored(&pb.BlockStored{BlockHashes: hashes, ParentBlockHash: u64p(42), TokenIds: tokens, BlockSize: 16, Medium: "GPU", GroupIdx: i32p(0)}),
			cleared(),
		},
	}
}

// TestSplitKv: a record over the limit becomes records under it, valid,
// with the same worker and source, and the same events in the same order
// once the split BlockStored and BlockRemoved are put back together.
func TestSplitKv(t *testing.T) {
	rec := splitFixture(3000, 20_000)
	for _, limit := range []int{proto.Size(rec), 200_000, 8_000, 1_000} {
		parts, err := splitKv(rec, limit)
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		if limit >= proto.Size(rec) {
			if len(parts) != 1 || parts[0] != rec {
				t.Fatalf("limit %d: a record that fits must come back as is", limit)
			}
			continue
		}
		var gone, hashes []uint64
		var tokens []uint32
		var kinds []string
		for i, p := range parts {
			if n := proto.Size(p); n > limit {
				t.Fatalf("limit %d: part %d is %d bytes", limit, i, n)
			}
			if err := events.Validate(p); err != nil {
				t.Fatalf("limit %d: part %d: %v", limit, i, err)
			}
			if p.Raw != nil || !proto.Equal(p.Worker, rec.Worker) || !proto.Equal(p.Source, rec.Source) || p.EventTimeUnixNano != 5 {
				t.Fatalf("limit %d: part %d: header %v %v raw=%v", limit, i, p.Worker, p.Source, p.Raw != nil)
			}
			for _, e := range p.Events {
				k := eventType(e)
				if len(kinds) == 0 || kinds[len(kinds)-1] != k {
					kinds = append(kinds, k)
				}
				if s := e.GetStored(); s != nil {
					want := uint64(42)
					if len(hashes) > 0 {
						want = hashes[len(hashes)-1]
					}
					if s.GetParentBlockHash() != want || s.GetMedium() != "GPU" || s.GroupIdx == nil {
						t.Fatalf("limit %d: stored part: parent %x want %x, medium %q", limit, s.GetParentBlockHash(), want, s.GetMedium())
					}
					hashes = append(hashes, s.GetBlockHashes()...)
					tokens = append(tokens, s.GetTokenIds()...)
				}
				if r := e.GetRemoved(); r != nil {
					gone = append(gone, r.GetBlockHashes()...)
				}
			}
		}
		orig := rec.Events
		if !slices.Equal(kinds, []string{"removed", "stored", "cleared"}) ||
			!slices.Equal(gone, orig[0].GetRemoved().GetBlockHashes()) ||
			!slices.Equal(hashes, orig[1].GetStored().GetBlockHashes()) || !slices.Equal(tokens, orig[1].GetStored().GetTokenIds()) {
			t.Fatalf("limit %d: the parts do not hold the events in order: %v", limit, kinds)
		}
	}
}

// TestSplitKvKeepsRawWhenItFits: under the limit nothing changes; just
// over it, only the raw payload goes.
func TestSplitKvKeepsRawWhenItFits(t *testing.T) {
	rec := splitFixture(10, 10)
	parts, err := splitKv(rec, proto.Size(rec)-1)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 1 || parts[0].Raw != nil || len(parts[0].Events) != 3 {
		t.Fatalf("got %d parts, raw %v", len(parts), parts[0].Raw != nil)
	}
}

// TestSplitKvUnsplittable: a block bigger than a record has room for is an
// error that says so, not a record the broker refuses.
func TestSplitKvUnsplittable(t *testing.T) {
	rec := splitFixture(4, 0)
	rec.Events = rec.Events[1:2]
	if _, err := splitKv(rec, 100); !errors.Is(err, errUnsplittable) {
		t.Fatalf("got %v, want errUnsplittable", err)
	}
}

// FuzzSplitKv: whatever the sizes, every part is under the limit and the
// blocks come back whole and in order, or the error says the record cannot
// be split.
func FuzzSplitKv(f *testing.F) {
	f.Add(uint16(3000), uint16(20000), uint32(8000))
	f.Add(uint16(1), uint16(0), uint32(120))
	f.Add(uint16(0), uint16(1), uint32(1))
	f.Fuzz(func(t *testing.T, blocks, removedN uint16, limit uint32) {
		rec := splitFixture(int(blocks%4096), int(removedN))
		if blocks == 0 {
			rec.Events = slices.Delete(rec.Events, 1, 2)
		}
		parts, err := splitKv(rec, int(limit%2_000_000))
		if err != nil {
			if !errors.Is(err, errUnsplittable) {
				t.Fatalf("unexpected error: %v", err)
			}
			return
		}
		var n int
		for _, p := range parts {
			if limit%2_000_000 > 0 && proto.Size(p) > int(limit%2_000_000) {
				t.Fatalf("part of %d bytes over %d", proto.Size(p), limit%2_000_000)
			}
			for _, e := range p.Events {
				n += len(e.GetStored().GetBlockHashes())
			}
		}
		if blocks > 0 && n != int(blocks%4096) {
			t.Fatalf("%d blocks in the parts, want %d", n, blocks%4096)
		}
	})
}
