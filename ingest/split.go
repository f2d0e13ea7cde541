package ingest

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Splitting exists because an engine message has no size bound that Kafka
// shares: one BlockStored of a long-context prompt (350k tokens) encodes to
// more than a broker takes in one record, and refusing it would leave the
// worker's state short of a prompt the engine did cache. Events are split
// between records in order, and a BlockStored or BlockRemoved too big for a
// record of its own is split by blocks. Replicas apply records of one worker
// in log order, so a split BlockStored whose later parts name the last block
// of the part before as their parent chains exactly as the whole event did.

// errUnsplittable: one block (or one event that has no blocks to split by)
// is bigger than a record may be.
var errUnsplittable = errors.New("an event cannot be split into records under the size limit")

// eventWrapBytes bounds what wrapping an event body costs in a record: the
// KvEvent oneof field and the record's events field, each a tag of one byte
// and a length of at most five.
const eventWrapBytes = 2 * (1 + 5)

// packedHeaderBytes bounds the tag and length of one packed repeated field.
const packedHeaderBytes = 1 + 5

// splitKv returns rec as one or more records whose encoded size is at most
// limit each, in the order their events must be applied. rec itself comes
// back when it fits. Otherwise the raw payload is left out (it is a copy of
// the engine's bytes, for audit; the events are what the state needs), and
// the events are spread over as many records as they need. Every part keeps
// rec's worker, time and source (the same seq: it is one engine batch).
func splitKv(rec *pb.KvEventRecord, limit int) ([]*pb.KvEventRecord, error) {
	if limit <= 0 || proto.Size(rec) <= limit {
		return []*pb.KvEventRecord{rec}, nil
	}
	shell := &pb.KvEventRecord{Worker: rec.Worker, EventTimeUnixNano: rec.EventTimeUnixNano, Source: rec.Source}
	whole := &pb.KvEventRecord{Worker: rec.Worker, EventTimeUnixNano: rec.EventTimeUnixNano, Source: rec.Source, Events: rec.Events}
	if proto.Size(whole) <= limit {
		return []*pb.KvEventRecord{whole}, nil
	}
	budget := limit - proto.Size(shell)
	var out []*pb.KvEventRecord
	cur := &pb.KvEventRecord{Worker: rec.Worker, EventTimeUnixNano: rec.EventTimeUnixNano, Source: rec.Source}
	used := 0
	add := func(e *pb.KvEvent) {
		n := eventFieldSize(e)
		if used+n > budget && len(cur.Events) > 0 {
			out = append(out, cur)
			cur = &pb.KvEventRecord{Worker: rec.Worker, EventTimeUnixNano: rec.EventTimeUnixNano, Source: rec.Source}
			used = 0
		}
		cur.Events = append(cur.Events, e)
		used += n
	}
	for i, e := range rec.Events {
		if eventFieldSize(e) <= budget {
			add(e)
			continue
		}
		pieces, err := splitEvent(e, budget)
		if err != nil {
			return nil, fmt.Errorf("events[%d]: %w", i, err)
		}
		for _, p := range pieces {
			add(p)
		}
	}
	if len(cur.Events) > 0 {
		out = append(out, cur)
	}
	for i, r := range out {
		if n := proto.Size(r); n > limit {
			// The sizes above are bounds, so this is a bug; refusing the
			// record is still better than sending the broker one it drops.
			return nil, fmt.Errorf("part %d of a split record is %d bytes, over the %d-byte limit", i, n, limit)
		}
	}
	return out, nil
}

// eventFieldSize is what e adds to a record's encoding.
func eventFieldSize(e *pb.KvEvent) int {
	return protowire.SizeTag(4) + protowire.SizeBytes(proto.Size(e))
}

// splitEvent splits one event too big for budget into events that each fit.
func splitEvent(e *pb.KvEvent, budget int) ([]*pb.KvEvent, error) {
	switch ev := e.GetEvent().(type) {
	case *pb.KvEvent_Stored:
		return splitStored(ev.Stored, budget)
	case *pb.KvEvent_Removed:
		return splitRemoved(ev.Removed, budget)
	}
	return nil, fmt.Errorf("%w: a %s event of %d bytes", errUnsplittable, eventType(e), proto.Size(e))
}

// splitStored splits a BlockStored by blocks: each part holds consecutive
// blocks with their tokens, and names the previous part's last block as its
// parent.
func splitStored(s *pb.BlockStored, budget int) ([]*pb.KvEvent, error) {
	if events.IsOffloadStore(s) {
		return splitOffloadStore(s, budget)
	}
	hashes, tokens, bs := s.GetBlockHashes(), s.GetTokenIds(), int(s.GetBlockSize())
	if bs <= 0 || len(tokens) != len(hashes)*bs {
		return nil, fmt.Errorf("%w: a BlockStored of %d blocks with %d tokens of block size %d", errUnsplittable, len(hashes), len(tokens), bs)
	}
	head := &pb.BlockStored{ParentBlockHash: proto.Uint64(0), BlockSize: s.BlockSize, Tier: s.Tier, Medium: s.Medium,
		LoraId: s.LoraId, LoraName: s.LoraName, GroupIdx: s.GroupIdx}
	room := budget - eventWrapBytes - proto.Size(head) - 2*packedHeaderBytes
	part := func(from, to int) *pb.KvEvent {
		p := proto.Clone(head).(*pb.BlockStored)
		p.ParentBlockHash = s.ParentBlockHash
		if from > 0 {
			p.ParentBlockHash = proto.Uint64(hashes[from-1])
		}
		p.BlockHashes = hashes[from:to:to]
		p.TokenIds = tokens[from*bs : to*bs : to*bs]
		return &pb.KvEvent{Event: &pb.KvEvent_Stored{Stored: p}}
	}
	var out []*pb.KvEvent
	from, used := 0, 0
	for i := range hashes {
		n := 8
		for _, t := range tokens[i*bs : (i+1)*bs] {
			n += protowire.SizeVarint(uint64(t))
		}
		if n > room {
			return nil, fmt.Errorf("%w: block %d of a BlockStored is %d bytes, the record has room for %d", errUnsplittable, i, n, room)
		}
		if used+n > room {
			out = append(out, part(from, i))
			from, used = i, 0
		}
		used += n
	}
	return append(out, part(from, len(hashes))), nil
}

// splitOffloadStore splits an offload store (events.IsOffloadStore) by
// hashes: each of its blocks resolves on its own, so no part needs a
// parent.
func splitOffloadStore(st *pb.BlockStored, budget int) ([]*pb.KvEvent, error) {
	head := &pb.BlockStored{BlockSize: st.BlockSize, Tier: st.Tier, Medium: st.Medium,
		LoraId: st.LoraId, LoraName: st.LoraName, GroupIdx: st.GroupIdx}
	return splitHashes(st.GetBlockHashes(), budget-proto.Size(head), "BlockStored", func(hs []uint64) *pb.KvEvent {
		p := proto.Clone(head).(*pb.BlockStored)
		p.BlockHashes = hs
		return &pb.KvEvent{Event: &pb.KvEvent_Stored{Stored: p}}
	})
}

// splitRemoved splits a BlockRemoved by hashes; removal has no order.
func splitRemoved(r *pb.BlockRemoved, budget int) ([]*pb.KvEvent, error) {
	head := &pb.BlockRemoved{Tier: r.Tier, Medium: r.Medium, GroupIdx: r.GroupIdx}
	return splitHashes(r.GetBlockHashes(), budget-proto.Size(head), "BlockRemoved", func(hs []uint64) *pb.KvEvent {
		p := proto.Clone(head).(*pb.BlockRemoved)
		p.BlockHashes = hs
		return &pb.KvEvent{Event: &pb.KvEvent_Removed{Removed: p}}
	})
}

// splitHashes cuts hashes into runs that fit room bytes of event besides
// its other fields, in order, and makes an event of each.
func splitHashes(hashes []uint64, room int, kind string, mk func([]uint64) *pb.KvEvent) ([]*pb.KvEvent, error) {
	per := (room - eventWrapBytes - packedHeaderBytes) / 8
	if per < 1 {
		return nil, fmt.Errorf("%w: a %s whose fields leave no room for a hash", errUnsplittable, kind)
	}
	var out []*pb.KvEvent
	for from := 0; from < len(hashes); from += per {
		to := min(from+per, len(hashes))
		out = append(out, mk(hashes[from:to:to]))
	}
	return out, nil
}
