package events

import (
	"errors"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// A hand-written decoder for LoadShares values, on the field reader and
// string block of the LoadDelta decoder (loaddeltawire.go), and with its
// wire rules: it accepts exactly the values proto.Unmarshal accepts and
// fills the same messages, proto.Equal to proto.Unmarshal's, without their
// unknown fields. FuzzLoadSharesWireMatchesProto compares the two.
//
// Every peer decodes every writer's snapshots, so their decoding is part of
// p (docs/scaling.md). A first pass counts the shares, which come from
// bytes present, so nothing is sized by a declared length; the shares and
// their worker refs are then one allocation, and the record's strings one
// block: four allocations a record, whatever its size, where the generic
// decoder makes three a share. A pointer into one share keeps the record's
// shares reachable (about 160 bytes each).

// shareSlot is a WorkerShare with its worker, allocated together.
type shareSlot struct {
	s   pb.WorkerShare
	ref pb.WorkerRef
}

// shareTextHint is the bytes of a share's strings (a worker id), usually.
const shareTextHint = 16

// errShareWorkers: a value with more shares than the caller allows.
var errShareWorkers = errors.New("load shares: too many shares")

// unmarshalLoadShares decodes a LoadShares value as proto.Unmarshal does,
// without its unknown fields. Past maxShares shares it returns
// errShareWorkers having checked the top level only and allocated nothing.
func unmarshalLoadShares(v []byte, maxShares int) (*pb.LoadShares, error) {
	n := 0
	top := fieldReader{b: v}
	for top.next() {
		if top.tag == 4<<3|wBytes {
			n++
		}
	}
	if top.err != nil {
		return nil, top.err
	}
	if n > maxShares {
		return nil, errShareWorkers
	}
	s := &pb.LoadShares{}
	dec := deltaDecoder{textHint: min(len(v), 16+shareTextHint*n)}
	var slots []shareSlot
	slots, s.Shares = newSlots(n, func(s *shareSlot) *pb.WorkerShare { return &s.s })
	top = fieldReader{b: v}
	for i := 0; top.next(); {
		switch top.tag {
		case 1<<3 | wBytes:
			top.fail(dec.str(&s.WriterId, top.val()))
		case 2<<3 | wVarint:
			s.Seq = top.x
		case 3<<3 | wVarint:
			s.ClockUnixNano = int64(top.x)
		case 4<<3 | wBytes:
			top.fail(dec.share(&slots[i], top.val()))
			i++
		}
	}
	if top.err != nil {
		return nil, top.err
	}
	return s, nil
}

func (dec *deltaDecoder) share(slot *shareSlot, b []byte) error {
	e := &slot.s
	r := fieldReader{b: b}
	for r.next() {
		switch r.tag {
		case 1<<3 | wBytes:
			e.Worker = &slot.ref
			r.fail(dec.workerRef(e.Worker, r.val()))
		case 2<<3 | wVarint:
			e.DecodeBlocks = r.x
		case 3<<3 | wVarint:
			e.Requests = uint32(r.x)
		case 4<<3 | wVarint:
			e.PrefillTokens = r.x
		case 5<<3 | wVarint:
			e.RecentDecisions = uint32(r.x)
		case 6<<3 | wVarint:
			e.RecentLocalTokens = r.x
		}
	}
	return r.err
}
