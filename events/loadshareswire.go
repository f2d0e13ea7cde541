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

// sampleSlot is a LatencySample with its latency inputs and optional
// targets, allocated together.
type sampleSlot struct {
	s         pb.LatencySample
	lat       [LoadDeltaLatencyInputs]uint32
	ttft, itl uint32
}

// shareTextHint is the bytes of a share's strings (a worker id), usually;
// sampleTextHint a sample's (a decision id, a ULID).
const (
	shareTextHint  = 16
	sampleTextHint = 26
)

// errShareWorkers: a value with more shares than the caller allows.
var errShareWorkers = errors.New("load shares: too many shares")

// unmarshalLoadShares decodes a LoadShares value as proto.Unmarshal does,
// without its unknown fields. Past maxShares shares it returns
// errShareWorkers having checked the top level only and allocated nothing.
//
// Past MaxShareSamples samples it returns the refusal, also before it
// allocates any.
func unmarshalLoadShares(v []byte, maxShares int) (*pb.LoadShares, error) {
	n, k := 0, 0
	top := fieldReader{b: v}
	for top.next() {
		switch top.tag {
		case 4<<3 | wBytes:
			n++
		case 5<<3 | wBytes:
			k++
		}
	}
	if top.err != nil {
		return nil, top.err
	}
	if n > maxShares {
		return nil, errShareWorkers
	}
	if k > MaxShareSamples {
		return nil, errTooManySamples
	}
	s := &pb.LoadShares{}
	dec := deltaDecoder{textHint: min(len(v), 16+shareTextHint*n+sampleTextHint*k)}
	var slots []shareSlot
	slots, s.Shares = newSlots(n, func(s *shareSlot) *pb.WorkerShare { return &s.s })
	var samples []sampleSlot
	samples, s.Samples = newSlots(k, func(s *sampleSlot) *pb.LatencySample { return &s.s })
	top = fieldReader{b: v}
	for i, j := 0, 0; top.next(); {
		switch top.tag {
		case 5<<3 | wBytes:
			top.fail(dec.sample(&samples[j], top.val()))
			j++
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

func (dec *deltaDecoder) sample(slot *sampleSlot, b []byte) error {
	e := &slot.s
	r := fieldReader{b: b}
	for r.next() {
		var err error
		switch r.tag {
		case 1<<3 | wBytes:
			err = dec.str(&e.DecisionId, r.val())
		case 2<<3 | wVarint:
			e.DecidedAtUnixNano = int64(r.x)
		case 3<<3 | wVarint:
			e.LatencyPath = uint32(r.x)
		case 4<<3 | wVarint, 4<<3 | wBytes:
			e.LatencyInputs, err = appendLatencyInputs(e.LatencyInputs, &slot.lat, &r)
		case 5<<3 | wVarint:
			slot.ttft, e.TtftUnits = uint32(r.x), &slot.ttft
		case 6<<3 | wVarint:
			e.TtftAtUnixNano = int64(r.x)
		case 7<<3 | wVarint:
			slot.itl, e.ItlUnits = uint32(r.x), &slot.itl
		case 8<<3 | wVarint:
			e.ItlAtUnixNano = int64(r.x)
		}
		r.fail(err)
	}
	return r.err
}
