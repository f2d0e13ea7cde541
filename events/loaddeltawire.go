package events

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// A hand-written decoder for LoadDelta values.
//
// Every replica of a group decodes every peer's load deltas, so their
// decoding is part of p, the per-peer cost that caps a group
// (docs/scaling.md, "Load deltas"). The generic decoder (proto.Unmarshal)
// spent most of it walking field tables by reflection and allocating each
// message, string, pointer and slice on its own; a record is a handful of
// small entries, a decision's chain up to MaxDeltaHashes packed hashes.
//
// unmarshalLoadDelta accepts exactly the values proto.Unmarshal accepts and
// fills the same generated messages, proto.Equal to proto.Unmarshal's,
// except that it drops unknown fields instead of keeping them: no rule
// reads them, and MarshalLoadDelta writes none. Its wire rules are
// proto.Unmarshal's for proto3: a field number from 1 to 2^29-1, an end
// group only where a group it skips ends; packed and unpacked repeated
// scalars, mixed in any order; the last value of a scalar field; repeated
// occurrences of a message field merged; a known field of another wire
// type kept as an unknown field (so dropped); strings valid UTF-8; enum
// values kept whatever they are; proto3 optional fields present when they
// occur, even with a zero value. FuzzLoadDeltaWireMatchesProto compares
// the two.
//
// Allocation: a first pass counts the entries, which come from bytes
// present (at least two each), so nothing is sized by a declared length.
// The decisions are then one slice of a struct that also holds their two
// worker refs and room for their nine latency inputs, the lifecycle
// entries one slice holding their worker ref and optional values, and
// the strings of a record share a block of bytes: a record makes a few
// allocations plus one per decision with hashes (allocated at their exact
// count), instead of one per message, string and slice. A string therefore
// keeps the record's other strings reachable (ids, a few hundred bytes),
// never its hashes or its value.

// decisionSlot is a DecisionDelta with what it points to, allocated
// together: its decode and prefill worker and the usual latency inputs.
type decisionSlot struct {
	d   pb.DecisionDelta
	ref [2]pb.WorkerRef
	lat [LoadDeltaLatencyInputs]uint32
}

// lifecycleSlot is a LifecycleDelta with what it points to.
type lifecycleSlot struct {
	l         pb.LifecycleDelta
	ref       pb.WorkerRef
	ttft, itl float64
	out       uint64
}

// wireField is one field read off the wire. Its value is in x (varint,
// fixed64, fixed32) or val (length-delimited); a group's is skipped.
type wireField struct {
	tag uint64 // field number << 3 | wire type
	x   uint64
	val []byte
}

// Tags of the fields the decoder reads: field number << 3 | wire type.
const (
	wVarint  = uint64(protowire.VarintType)
	wFixed64 = uint64(protowire.Fixed64Type)
	wBytes   = uint64(protowire.BytesType)
)

var (
	errDeltaWire = errors.New("proto: cannot parse invalid wire-format data")
	errDeltaUTF8 = errors.New("proto: string field contains invalid UTF-8")
)

// readField reads the field at the start of b: the field and its size in
// bytes, or an error where proto.Unmarshal would fail on it.
func readField(b []byte) (f wireField, n int, err error) {
	if len(b) > 0 && b[0] < 0x80 {
		f.tag, n = uint64(b[0]), 1
	} else if f.tag, n = protowire.ConsumeVarint(b); n < 0 {
		return f, 0, errDeltaWire
	}
	num, typ := f.tag>>3, protowire.Type(f.tag&7)
	if num < uint64(protowire.MinValidNumber) || num > uint64(protowire.MaxValidNumber) {
		return f, 0, errDeltaWire
	}
	b = b[n:]
	m := -1
	switch typ {
	case protowire.VarintType:
		if len(b) > 0 && b[0] < 0x80 {
			f.x, m = uint64(b[0]), 1
		} else {
			f.x, m = protowire.ConsumeVarint(b)
		}
	case protowire.Fixed64Type:
		if len(b) >= 8 {
			f.x, m = binary.LittleEndian.Uint64(b), 8
		}
	case protowire.Fixed32Type:
		if len(b) >= 4 {
			f.x, m = uint64(binary.LittleEndian.Uint32(b)), 4
		}
	case protowire.BytesType:
		f.val, m = protowire.ConsumeBytes(b)
	case protowire.StartGroupType:
		// An unknown group, skipped whole as proto.Unmarshal skips it.
		m = protowire.ConsumeFieldValue(protowire.Number(num), typ, b)
	}
	// An end group outside a group, or wire type 6 or 7, is malformed.
	if m < 0 {
		return f, 0, errDeltaWire
	}
	return f, n + m, nil
}

// deltaDecoder holds what one record's decoding shares: the bytes of its
// strings, and the slots its entries are carved from.
type deltaDecoder struct {
	// text holds the bytes of the strings decoded so far, which point into
	// it. It is only ever appended to, past its length: a byte a string
	// points to is never written again, which is what makes the strings
	// immutable. When it is full, a new block replaces it, and the strings
	// keep the old one alive.
	text      []byte
	textHint  int
	decisions []decisionSlot
	lifecycle []lifecycleSlot
}

// Bytes of strings a record's entries usually hold (a UUID, a request id,
// worker ids): the first block of text, so that a record's strings are
// usually one allocation.
const (
	decisionTextHint  = 96
	lifecycleTextHint = 64
)

// unmarshalLoadDelta decodes a LoadDelta value as proto.Unmarshal does,
// without its unknown fields (see above). maxEntries bounds the decisions
// and lifecycle entries together: past it, it returns errDeltaEntries
// having checked the top level only and allocated nothing, so that no
// record makes a replica allocate far more than MaxDeltaEntries entries.
func unmarshalLoadDelta(v []byte, maxEntries int) (*pb.LoadDelta, error) {
	nd, nl := 0, 0
	err := walkFields(v, func(f wireField) error {
		switch f.tag {
		case 2<<3 | wBytes:
			nd++
		case 3<<3 | wBytes:
			nl++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if nd+nl > maxEntries {
		return nil, errDeltaEntries
	}
	d := &pb.LoadDelta{}
	// The strings are bytes of v, so v bounds them all.
	dec := deltaDecoder{textHint: min(len(v), 16+decisionTextHint*nd+lifecycleTextHint*nl)}
	if nd > 0 {
		dec.decisions = make([]decisionSlot, nd)
		d.Decisions = make([]*pb.DecisionDelta, nd)
		for i := range dec.decisions {
			d.Decisions[i] = &dec.decisions[i].d
		}
	}
	if nl > 0 {
		dec.lifecycle = make([]lifecycleSlot, nl)
		d.Lifecycle = make([]*pb.LifecycleDelta, nl)
		for i := range dec.lifecycle {
			d.Lifecycle[i] = &dec.lifecycle[i].l
		}
	}
	id, il := 0, 0
	err = walkFields(v, func(f wireField) (err error) {
		switch f.tag {
		case 1<<3 | wBytes:
			err = dec.str(&d.WriterId, f.val)
		case 2<<3 | wBytes:
			err = dec.decision(&dec.decisions[id], f.val)
			id++
		case 3<<3 | wBytes:
			err = dec.lifecycleEntry(&dec.lifecycle[il], f.val)
			il++
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// errDeltaEntries: a value with more entries than the caller allows.
var errDeltaEntries = errors.New("load delta: too many entries")

func (dec *deltaDecoder) decision(s *decisionSlot, b []byte) error {
	e := &s.d
	return walkFields(b, func(f wireField) (err error) {
		if ok, err := dec.entryIDs(f, &e.DecisionId, &e.RequestId); ok {
			return err
		}
		switch f.tag {
		case 3<<3 | wVarint:
			e.DecidedAtUnixNano = int64(f.x)
		case 4<<3 | wBytes:
			e.DecodeWorker = &s.ref[0]
			err = dec.workerRef(e.DecodeWorker, f.val)
		case 5<<3 | wBytes:
			e.PrefillWorker = &s.ref[1]
			err = dec.workerRef(e.PrefillWorker, f.val)
		case 6<<3 | wVarint:
			e.Local = f.x != 0
		case 7<<3 | wVarint:
			e.BlockSize = uint32(f.x)
		case 8<<3 | wVarint:
			e.PromptTokens = uint32(f.x)
		case 9<<3 | wVarint:
			e.EffectiveIsl = uint32(f.x)
		case 10<<3 | wVarint:
			e.PrefillCachedTokens = uint32(f.x)
		case 11<<3 | wFixed64, 11<<3 | wBytes:
			e.ActiveHashes, err = appendFixed64s(e.ActiveHashes, f)
		case 12<<3 | wVarint:
			e.SharesHashesWith = uint32(f.x)
		case 13<<3 | wVarint:
			e.SharedHashes = uint32(f.x)
		case 14<<3 | wVarint:
			e.LatencyPath = uint32(f.x)
		case 15<<3 | wVarint, 15<<3 | wBytes:
			if e.LatencyInputs == nil {
				e.LatencyInputs = s.lat[:0:len(s.lat)]
			}
			e.LatencyInputs, err = appendUint32s(e.LatencyInputs, f)
		}
		return err
	})
}

func (dec *deltaDecoder) lifecycleEntry(s *lifecycleSlot, b []byte) error {
	e := &s.l
	return walkFields(b, func(f wireField) (err error) {
		if ok, err := dec.entryIDs(f, &e.DecisionId, &e.RequestId); ok {
			return err
		}
		switch f.tag {
		case 3<<3 | wVarint:
			e.Kind = pb.OutcomeEvent_Kind(int32(f.x))
		case 4<<3 | wVarint:
			e.EventTimeUnixNano = int64(f.x)
		case 5<<3 | wBytes:
			e.DecodeWorker = &s.ref
			err = dec.workerRef(e.DecodeWorker, f.val)
		case 6<<3 | wFixed64:
			s.ttft, e.TtftMs = math.Float64frombits(f.x), &s.ttft
		case 7<<3 | wFixed64:
			s.itl, e.ItlMsMean = math.Float64frombits(f.x), &s.itl
		case 8<<3 | wVarint:
			s.out, e.OutputTokens = f.x, &s.out
		}
		return err
	})
}

// entryIDs decodes the ids both kinds of entry start with (fields 1 and
// 2); ok is false for any other field.
func (dec *deltaDecoder) entryIDs(f wireField, decisionID, requestID *string) (ok bool, err error) {
	switch f.tag {
	case 1<<3 | wBytes:
		return true, dec.str(decisionID, f.val)
	case 2<<3 | wBytes:
		return true, dec.str(requestID, f.val)
	}
	return false, nil
}

// workerRef merges an encoded WorkerRef into w, as a repeated occurrence
// of a message field is merged.
func (dec *deltaDecoder) workerRef(w *pb.WorkerRef, b []byte) error {
	return walkFields(b, func(f wireField) (err error) {
		switch f.tag {
		case 1<<3 | wBytes:
			err = dec.str(&w.WorkerId, f.val)
		case 2<<3 | wVarint:
			w.DpRank = uint32(f.x)
		}
		return err
	})
}

// walkFields calls set with each field of the message b, in order,
// stopping at the first error, of the wire or of set.
func walkFields(b []byte, set func(f wireField) error) error {
	for len(b) > 0 {
		f, n, err := readField(b)
		if err != nil {
			return err
		}
		if err := set(f); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// str sets *dst to a string field's value, copied into text.
func (dec *deltaDecoder) str(dst *string, val []byte) error {
	if !utf8.Valid(val) {
		return errDeltaUTF8
	}
	if len(val) == 0 {
		*dst = ""
		return nil
	}
	if cap(dec.text)-len(dec.text) < len(val) {
		dec.text = make([]byte, 0, max(len(val), dec.textHint, 2*cap(dec.text)))
	}
	at := len(dec.text)
	dec.text = append(dec.text, val...)
	*dst = unsafe.String(&dec.text[at], len(val))
	return nil
}

// appendFixed64s appends a repeated fixed64 field's values: one, or a
// packed list. The first list of a field is allocated at its length.
func appendFixed64s(s []uint64, f wireField) ([]uint64, error) {
	if f.tag&7 == wFixed64 {
		return append(s, f.x), nil
	}
	if len(f.val)%8 != 0 {
		return s, errDeltaWire
	}
	n, k := len(s), len(f.val)/8
	if s == nil {
		s = make([]uint64, k)
	} else {
		s = slices.Grow(s, k)[:n+k]
	}
	for i, dst := 0, s[n:]; i < len(dst); i++ {
		dst[i] = binary.LittleEndian.Uint64(f.val[8*i:])
	}
	return s, nil
}

// appendUint32s appends a repeated uint32 field's values: one varint, or
// a packed list of them, each the low 32 bits of its varint as
// proto.Unmarshal takes them.
func appendUint32s(s []uint32, f wireField) ([]uint32, error) {
	if f.tag&7 == wVarint {
		return append(s, uint32(f.x)), nil
	}
	for val := f.val; len(val) > 0; {
		var x uint64
		n := 1
		if val[0] < 0x80 {
			x = uint64(val[0])
		} else if x, n = protowire.ConsumeVarint(val); n < 0 {
			return s, errDeltaWire
		}
		s = append(s, uint32(x))
		val = val[n:]
	}
	return s, nil
}
