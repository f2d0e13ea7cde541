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
// the strings of a record share one block of bytes: a record makes four
// allocations plus one per decision with hashes (allocated at their exact
// count), where the generic decoder made one per message, string, pointer
// and slice (9 for a record of one decision, 70 for eight). The price is
// reachability: a pointer into one entry keeps all of the record's entries
// reachable (352 bytes a decision, 208 a lifecycle entry), and a string
// all of the record's strings (ids: a few hundred bytes); never its
// hashes, each their own allocation, nor its value, which nothing points
// into.

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

// Wire types, to spell the tags the decoder reads: field number << 3 |
// wire type.
const (
	wVarint  = uint64(protowire.VarintType)
	wFixed64 = uint64(protowire.Fixed64Type)
	wBytes   = uint64(protowire.BytesType)
)

var (
	errDeltaWire = errors.New("proto: cannot parse invalid wire-format data")
	errDeltaUTF8 = errors.New("proto: string field contains invalid UTF-8")
)

// fieldReader reads a message's fields in order:
//
//	r := fieldReader{b: b}
//	for r.next() {
//		switch r.tag { ... }         // fields it does not know are skipped
//		r.fail(err)                  // an error of a field's value stops it
//	}
//	return r.err
//
// next inlines into the loop, where a callback per field would cost an
// indirect call and a copy of the field. The reader keeps positions, not
// slices, so that reading a field writes no pointer: while the collector
// marks, each pointer written through a pointer costs a write barrier.
type fieldReader struct {
	b  []byte
	at int // where the next field starts
	// The field read: tag is its number << 3 | wire type, x its value
	// (varint, fixed64, fixed32) or b[lo:hi] (length-delimited); a group's
	// value is skipped.
	tag, x uint64
	lo, hi int
	err    error
}

// val is the length-delimited value of the field read.
func (r *fieldReader) val() []byte { return r.b[r.lo:r.hi] }

// next reads the next field: false at the end of the message or at the
// first error.
func (r *fieldReader) next() bool {
	return r.at < len(r.b) && r.err == nil && r.read()
}

// read reads the field at r.at and moves past it; false, with r.err set,
// where proto.Unmarshal would fail on it.
func (r *fieldReader) read() bool {
	b, n := r.b[r.at:], 1
	if b[0] < 0x80 {
		r.tag = uint64(b[0])
	} else if r.tag, n = protowire.ConsumeVarint(b); n < 0 {
		r.err = errDeltaWire
		return false
	}
	num, typ := r.tag>>3, protowire.Type(r.tag&7)
	if num < uint64(protowire.MinValidNumber) || num > uint64(protowire.MaxValidNumber) {
		r.err = errDeltaWire
		return false
	}
	b = b[n:]
	m := -1
	switch typ {
	case protowire.VarintType:
		if len(b) > 0 && b[0] < 0x80 {
			r.x, m = uint64(b[0]), 1
		} else {
			r.x, m = protowire.ConsumeVarint(b)
		}
	case protowire.Fixed64Type:
		if len(b) >= 8 {
			r.x, m = binary.LittleEndian.Uint64(b), 8
		}
	case protowire.Fixed32Type:
		if len(b) >= 4 {
			r.x, m = uint64(binary.LittleEndian.Uint32(b)), 4
		}
	case protowire.BytesType:
		var val []byte
		if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
			val, m = b[1:1+b[0]], 1+int(b[0])
		} else {
			val, m = protowire.ConsumeBytes(b)
		}
		r.hi = r.at + n + m
		r.lo = r.hi - len(val)
	case protowire.StartGroupType:
		// An unknown group, skipped whole as proto.Unmarshal skips it.
		m = protowire.ConsumeFieldValue(protowire.Number(num), typ, b)
	}
	// An end group outside a group, or wire type 6 or 7, is malformed.
	if m < 0 {
		r.err = errDeltaWire
		return false
	}
	r.at += n + m
	return true
}

// fail stops the reader at err, unless err is nil.
func (r *fieldReader) fail(err error) {
	if err != nil {
		r.err = err
	}
}

// deltaDecoder holds what one record's decoding shares: the bytes of its
// strings.
type deltaDecoder struct {
	// text[:used] holds the bytes of the strings decoded so far, which
	// point into it. Only text[used:] is ever written: a byte a string
	// points to is never written again, which is what makes the strings
	// immutable. When it is full, a new block replaces it, and the strings
	// keep the old one alive. (used, not len(text), marks the end, so that
	// a string costs no pointer write but its own.)
	text     []byte
	used     int
	textHint int
}

// Bytes of strings a record's entries usually hold (two ULIDs, 26 bytes
// each, and worker ids): the first block of text, so that a record's
// strings are usually one allocation.
const (
	decisionTextHint  = 80
	lifecycleTextHint = 64
)

// unmarshalLoadDelta decodes a LoadDelta value as proto.Unmarshal does,
// without its unknown fields (see above). maxEntries bounds the decisions
// and lifecycle entries together: past it, it returns errDeltaEntries
// having checked the top level only and allocated nothing, so that no
// record makes a replica allocate far more than MaxDeltaEntries entries.
func unmarshalLoadDelta(v []byte, maxEntries int) (*pb.LoadDelta, error) {
	nd, nl := 0, 0
	top := fieldReader{b: v}
	for top.next() {
		switch top.tag {
		case 2<<3 | wBytes:
			nd++
		case 3<<3 | wBytes:
			nl++
		}
	}
	if top.err != nil {
		return nil, top.err
	}
	if nd+nl > maxEntries {
		return nil, errDeltaEntries
	}
	d := &pb.LoadDelta{}
	// The strings are bytes of v, so v bounds them all.
	dec := deltaDecoder{textHint: min(len(v), 16+decisionTextHint*nd+lifecycleTextHint*nl)}
	var decisions []decisionSlot
	decisions, d.Decisions = newSlots(nd, func(s *decisionSlot) *pb.DecisionDelta { return &s.d })
	var lifecycle []lifecycleSlot
	lifecycle, d.Lifecycle = newSlots(nl, func(s *lifecycleSlot) *pb.LifecycleDelta { return &s.l })
	top = fieldReader{b: v}
	for id, il := 0, 0; top.next(); {
		switch top.tag {
		case 1<<3 | wBytes:
			top.fail(dec.str(&d.WriterId, top.val()))
		case 2<<3 | wBytes:
			top.fail(dec.decision(&decisions[id], top.val()))
			id++
		case 3<<3 | wBytes:
			top.fail(dec.lifecycleEntry(&lifecycle[il], top.val()))
			il++
		}
	}
	if top.err != nil {
		return nil, top.err
	}
	return d, nil
}

// newSlots allocates n slots and the pointers to the entry each holds: a
// record's entries of one kind are two allocations, however many. None for
// n = 0, as proto.Unmarshal leaves an absent repeated field nil.
func newSlots[S, M any](n int, entry func(*S) *M) ([]S, []*M) {
	if n == 0 {
		return nil, nil
	}
	slots, ptrs := make([]S, n), make([]*M, n)
	for i := range slots {
		ptrs[i] = entry(&slots[i])
	}
	return slots, ptrs
}

// errDeltaEntries: a value with more entries than the caller allows.
var errDeltaEntries = errors.New("load delta: too many entries")

func (dec *deltaDecoder) decision(s *decisionSlot, b []byte) error {
	e := &s.d
	r := fieldReader{b: b}
	for dec.nextEntryField(&r, &e.DecisionId, &e.RequestId) {
		var err error
		switch r.tag {
		case 3<<3 | wVarint:
			e.DecidedAtUnixNano = int64(r.x)
		case 4<<3 | wBytes:
			e.DecodeWorker = &s.ref[0]
			err = dec.workerRef(e.DecodeWorker, r.val())
		case 5<<3 | wBytes:
			e.PrefillWorker = &s.ref[1]
			err = dec.workerRef(e.PrefillWorker, r.val())
		case 6<<3 | wVarint:
			e.Local = r.x != 0
		case 7<<3 | wVarint:
			e.BlockSize = uint32(r.x)
		case 8<<3 | wVarint:
			e.PromptTokens = uint32(r.x)
		case 9<<3 | wVarint:
			e.EffectiveIsl = uint32(r.x)
		case 10<<3 | wVarint:
			e.PrefillCachedTokens = uint32(r.x)
		case 11<<3 | wFixed64, 11<<3 | wBytes:
			e.ActiveHashes, err = appendFixed64s(e.ActiveHashes, &r)
		case 12<<3 | wVarint:
			e.SharesHashesWith = uint32(r.x)
		case 13<<3 | wVarint:
			e.SharedHashes = uint32(r.x)
		case 14<<3 | wVarint:
			e.LatencyPath = uint32(r.x)
		case 15<<3 | wVarint, 15<<3 | wBytes:
			e.LatencyInputs, err = appendLatencyInputs(e.LatencyInputs, &s.lat, &r)
		}
		r.fail(err)
	}
	return r.err
}

func (dec *deltaDecoder) lifecycleEntry(s *lifecycleSlot, b []byte) error {
	e := &s.l
	r := fieldReader{b: b}
	for dec.nextEntryField(&r, &e.DecisionId, &e.RequestId) {
		var err error
		switch r.tag {
		case 3<<3 | wVarint:
			e.Kind = pb.OutcomeEvent_Kind(int32(r.x))
		case 4<<3 | wVarint:
			e.EventTimeUnixNano = int64(r.x)
		case 5<<3 | wBytes:
			e.DecodeWorker = &s.ref
			err = dec.workerRef(e.DecodeWorker, r.val())
		case 6<<3 | wFixed64:
			s.ttft, e.TtftMs = math.Float64frombits(r.x), &s.ttft
		case 7<<3 | wFixed64:
			s.itl, e.ItlMsMean = math.Float64frombits(r.x), &s.itl
		case 8<<3 | wVarint:
			s.out, e.OutputTokens = r.x, &s.out
		}
		r.fail(err)
	}
	return r.err
}

// nextEntryField is r.next for an entry: it decodes the ids both kinds of
// entry start with, the decision id (field 1) and the request id (field
// 2), and stops at the entry's other fields.
func (dec *deltaDecoder) nextEntryField(r *fieldReader, decisionID, requestID *string) bool {
	for r.next() {
		switch r.tag {
		case 1<<3 | wBytes:
			r.fail(dec.str(decisionID, r.val()))
		case 2<<3 | wBytes:
			r.fail(dec.str(requestID, r.val()))
		default:
			return true
		}
	}
	return false
}

// workerRef merges an encoded WorkerRef into w, as a repeated occurrence
// of a message field is merged.
func (dec *deltaDecoder) workerRef(w *pb.WorkerRef, b []byte) error {
	r := fieldReader{b: b}
	for r.next() {
		switch r.tag {
		case 1<<3 | wBytes:
			r.fail(dec.str(&w.WorkerId, r.val()))
		case 2<<3 | wVarint:
			w.DpRank = uint32(r.x)
		}
	}
	return r.err
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
	if len(dec.text)-dec.used < len(val) {
		dec.text, dec.used = make([]byte, max(len(val), dec.textHint, 2*len(dec.text))), 0
	}
	at := dec.used
	dec.used += copy(dec.text[at:], val)
	*dst = unsafe.String(&dec.text[at], len(val))
	return nil
}

// appendLatencyInputs appends a latency_inputs field's values to in, which
// starts in lat, the room its entry has for them.
func appendLatencyInputs(in []uint32, lat *[LoadDeltaLatencyInputs]uint32, r *fieldReader) ([]uint32, error) {
	if in == nil {
		in = lat[:0:len(lat)]
	}
	return appendUint32s(in, r)
}

// appendFixed64s appends a repeated fixed64 field's values: one, or a
// packed list. The first list of a field is allocated at its length.
func appendFixed64s(s []uint64, r *fieldReader) ([]uint64, error) {
	if r.tag&7 == wFixed64 {
		return append(s, r.x), nil
	}
	val := r.val()
	if len(val)%8 != 0 {
		return s, errDeltaWire
	}
	n, k := len(s), len(val)/8
	if s == nil {
		s = make([]uint64, k)
	} else {
		s = slices.Grow(s, k)[:n+k]
	}
	putFixed64s(s[n:], val)
	return s, nil
}

// putFixed64s decodes the little-endian uint64s of val into dst, of
// len(val)/8 elements. Where the machine is little endian too, that is a
// copy of the bytes: a chain of 256 hashes was a third of a record's
// decoding as a loop.
func putFixed64s(dst []uint64, val []byte) {
	if nativeLittleEndian && len(dst) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 8*len(dst)), val)
		return
	}
	putFixed64sPortable(dst, val)
}

func putFixed64sPortable(dst []uint64, val []byte) {
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint64(val[8*i:])
	}
}

var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// appendUint32s appends a repeated uint32 field's values: one varint, or
// a packed list of them, each the low 32 bits of its varint as
// proto.Unmarshal takes them.
func appendUint32s(s []uint32, r *fieldReader) ([]uint32, error) {
	if r.tag&7 == wVarint {
		return append(s, uint32(r.x)), nil
	}
	for val := r.val(); len(val) > 0; {
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
