package ingest

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// MaxPayloadBytes bounds one engine batch. The record carries the raw bytes
// next to the normalized events, so a larger batch could not be written
// under events.MaxValueBytes anyway; refusing it early bounds memory too.
const MaxPayloadBytes = events.MaxValueBytes / 2

// MaxTimestampSeconds bounds an engine batch's timestamp: 2100-01-01 UTC in
// seconds since the epoch. A later clock is a broken or hostile engine, and
// the bound is what lets the float seconds become int64 nanoseconds without
// overflow.
const MaxTimestampSeconds = 4102444800

// maxDepth bounds nesting while skipping values nobody reads (extra_keys,
// metadata, future fields). Engines nest 3 or 4 levels; a hostile payload
// of nested one-element arrays must not recurse a million times.
const maxDepth = 32

// Encoding of the events of a batch, for logs and tests.
const (
	EncodingPositional = "positional"
	EncodingMap        = "map"
	EncodingMixed      = "mixed"
)

// Batch is one decoded engine batch (one ZMQ message).
type Batch struct {
	// TimeUnixNano is the engine's batch timestamp; 0 if it sent nil.
	TimeUnixNano int64
	// DPRank is the batch's data-parallel rank (vLLM data_parallel_rank,
	// SGLang attn_dp_rank); HasDPRank is false for 2-element batches and nil.
	DPRank    uint32
	HasDPRank bool
	// Events in engine order, normalized. Demoted and unknown events are
	// UnknownEvent entries at their original index.
	Events []*pb.KvEvent
	// Demoted lists the events that were demoted, for counting.
	Demoted []Demotion
	// Encoding is EncodingPositional, EncodingMap, EncodingMixed or "" for
	// a batch without events.
	Encoding string
}

// Demotion records an event turned into an UnknownEvent because its values
// would make the record invalid.
type Demotion struct {
	Event  int
	Tag    string
	Reason string
}

// Event field ids, shared by positional and map decoding.
const (
	fHashes = iota
	fParent
	fTokens
	fBlockSize
	fLoraID
	fMedium
	fLoraName
	fGroupIdx
	nFields
	fSkip = -1
)

var fieldNames = [nFields]string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "group_idx"}

// Positional layouts: the field at each array index (index 0 is the tag).
// vLLM appended fields over its releases without reordering, so one table
// covers every vintage: a shorter array simply lacks the trailing fields
// (v0.9 BlockStored has 6 elements, v0.22 has 12). SGLang copied the layout
// up to extra_keys; it has no group_idx, so nothing past index 8 is read.
var (
	vllmStored   = []int{fSkip, fHashes, fParent, fTokens, fBlockSize, fLoraID, fMedium, fLoraName, fSkip /*extra_keys*/, fGroupIdx}
	vllmRemoved  = []int{fSkip, fHashes, fMedium, fGroupIdx}
	sglStored    = []int{fSkip, fHashes, fParent, fTokens, fBlockSize, fLoraID, fMedium, fLoraName, fSkip /*extra_keys*/}
	sglRemoved   = []int{fSkip, fHashes, fMedium}
	mapFieldByID = map[string]int{
		"block_hashes": fHashes, "parent_block_hash": fParent, "token_ids": fTokens, "block_size": fBlockSize,
		"lora_id": fLoraID, "medium": fMedium, "lora_name": fLoraName, "group_idx": fGroupIdx,
	}
)

// Engine tags this build understands.
const (
	TagBlockStored             = "BlockStored"
	TagBlockStoredWithMetadata = "BlockStoredWithMetadata" // SGLang
	TagBlockRemoved            = "BlockRemoved"
	TagAllBlocksCleared        = "AllBlocksCleared"
)

type span struct{ start, end int }

type fieldSet struct {
	has [nFields]bool
	at  [nFields]span
}

// decoder walks one payload at pos. Scalars are read straight off the
// bytes (msgpack.go); the structure walk (and its limits) is here, so
// offsets in errors are exact and no length read from the wire is trusted
// before the bytes are known to be there.
type decoder struct {
	buf    []byte
	pos    int
	engine pb.Engine
	event  int
	field  string
}

// DecodeBatch decodes one engine batch: the msgpack payload of a ZMQ
// message from vLLM, SGLang or TensorRT-LLM's vLLM-compatible stream.
//
// The outer batch is always a positional array [ts, events, dp_rank?,
// ...]; each event is either a positional array (tag first) or a map with a
// "type" key, told apart by the first byte, never by version. Hashes may be
// unsigned, negative or byte strings. Unknown tags become UnknownEvent,
// unknown fields and extra elements are skipped (the raw payload keeps
// them). Errors are *DecodeError; DecodeBatch never panics.
func DecodeBatch(payload []byte, engine pb.Engine) (*Batch, error) {
	dc := &decoder{buf: payload, engine: engine, event: -1}
	if len(payload) > MaxPayloadBytes {
		return nil, dc.fail(ReasonTooLarge, 0, fmt.Errorf("payload is %d bytes, over %d", len(payload), MaxPayloadBytes))
	}
	return dc.batch()
}

func (dc *decoder) off() int { return dc.pos }

// left is the number of bytes after pos.
func (dc *decoder) left() int { return len(dc.buf) - dc.pos }

func (dc *decoder) seek(off int) { dc.pos = off }

func (dc *decoder) fail(reason string, off int, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		reason, err = ReasonTruncated, errors.New("payload ends inside a value")
	}
	return &DecodeError{Reason: reason, Event: dc.event, Field: dc.field, Offset: off, Err: err}
}

func (dc *decoder) peek() (byte, error) {
	o := dc.off()
	if o >= len(dc.buf) {
		return 0, dc.fail(ReasonTruncated, o, io.ErrUnexpectedEOF)
	}
	return dc.buf[o], nil
}

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}
func isMap(c byte) bool { return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 }
func isUint(c byte) bool {
	return c <= msgpcode.PosFixedNumHigh || c == msgpcode.Uint8 || c == msgpcode.Uint16 || c == msgpcode.Uint32 || c == msgpcode.Uint64
}
func isInt(c byte) bool {
	return c >= msgpcode.NegFixedNumLow || c == msgpcode.Int8 || c == msgpcode.Int16 || c == msgpcode.Int32 || c == msgpcode.Int64
}

// arrayLen reads an array header whose code the caller checked, and checks
// that n elements (at least one byte each) can fit in what is left.
func (dc *decoder) arrayLen() (int, error) {
	off := dc.off()
	n, err := dc.readArrayLen()
	if err != nil {
		return 0, dc.fail(ReasonBadMsgpack, off, err)
	}
	if n > dc.left() {
		return 0, dc.fail(ReasonTruncated, off, fmt.Errorf("array of %d elements, only %d bytes left", n, dc.left()))
	}
	return n, nil
}

func (dc *decoder) mapLen() (int, error) {
	off := dc.off()
	n, err := dc.readMapLen()
	if err != nil {
		return 0, dc.fail(ReasonBadMsgpack, off, err)
	}
	if 2*n > dc.left() {
		return 0, dc.fail(ReasonTruncated, off, fmt.Errorf("map of %d entries, only %d bytes left", n, dc.left()))
	}
	return n, nil
}

// skip steps over one value of any type, with a depth limit.
func (dc *decoder) skip(depth int) error {
	off := dc.off()
	if depth > maxDepth {
		return dc.fail(ReasonTooDeep, off, fmt.Errorf("values nested deeper than %d", maxDepth))
	}
	c, err := dc.peek()
	if err != nil {
		return err
	}
	switch {
	case isArray(c):
		n, err := dc.arrayLen()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := dc.skip(depth + 1); err != nil {
				return err
			}
		}
	case isMap(c):
		n, err := dc.mapLen()
		if err != nil {
			return err
		}
		for i := 0; i < 2*n; i++ {
			if err := dc.skip(depth + 1); err != nil {
				return err
			}
		}
	default:
		n, err := dc.scalarSize(off, c)
		if err != nil {
			return err
		}
		dc.seek(off + n)
	}
	return nil
}

// scalarSize is the encoded size of the scalar (not array or map) at off,
// checked against the payload: skipping a value is then one seek, with no
// copy, and a hostile declared length is refused before anything reads
// toward it.
func (dc *decoder) scalarSize(off int, c byte) (int, error) {
	size := 0
	switch {
	case c <= msgpcode.PosFixedNumHigh || c >= msgpcode.NegFixedNumLow, c == msgpcode.Nil, c == msgpcode.False, c == msgpcode.True:
		size = 1
	case msgpcode.IsFixedString(c):
		size = 1 + int(c&msgpcode.FixedStrMask)
	case c == msgpcode.Uint8 || c == msgpcode.Int8:
		size = 2
	case c == msgpcode.Uint16 || c == msgpcode.Int16:
		size = 3
	case c == msgpcode.Uint32 || c == msgpcode.Int32 || c == msgpcode.Float:
		size = 5
	case c == msgpcode.Uint64 || c == msgpcode.Int64 || c == msgpcode.Double:
		size = 9
	case c == msgpcode.FixExt1:
		size = 3
	case c == msgpcode.FixExt2:
		size = 4
	case c == msgpcode.FixExt4:
		size = 6
	case c == msgpcode.FixExt8:
		size = 10
	case c == msgpcode.FixExt16:
		size = 18
	default:
		var width, extra int
		switch c {
		case msgpcode.Str8, msgpcode.Bin8:
			width = 1
		case msgpcode.Str16, msgpcode.Bin16:
			width = 2
		case msgpcode.Str32, msgpcode.Bin32:
			width = 4
		case msgpcode.Ext8:
			width, extra = 1, 1
		case msgpcode.Ext16:
			width, extra = 2, 1
		case msgpcode.Ext32:
			width, extra = 4, 1
		default:
			return 0, dc.fail(ReasonBadMsgpack, off, fmt.Errorf("byte 0x%02x is no msgpack type", c))
		}
		if off+1+width > len(dc.buf) {
			return 0, dc.fail(ReasonTruncated, off, io.ErrUnexpectedEOF)
		}
		n := 0
		for _, b := range dc.buf[off+1 : off+1+width] {
			n = n<<8 | int(b)
		}
		size = 1 + width + extra + n
	}
	if size > len(dc.buf)-off {
		return 0, dc.fail(ReasonTruncated, off, fmt.Errorf("value of %d bytes, only %d left", size, len(dc.buf)-off))
	}
	return size, nil
}

func (dc *decoder) batch() (*Batch, error) {
	c, err := dc.peek()
	if err != nil {
		return nil, err
	}
	b := &Batch{}
	var spans []span
	switch {
	case isArray(c):
		spans, err = dc.arrayBatch(b)
	case isMap(c):
		spans, err = dc.mapBatch(b)
	default:
		err = dc.fail(ReasonNotArray, 0, fmt.Errorf("batch starts with 0x%02x, want an array or a map", c))
	}
	if err != nil {
		return nil, err
	}
	if dc.left() != 0 {
		return nil, dc.fail(ReasonTrailing, dc.off(), fmt.Errorf("%d bytes after the batch", dc.left()))
	}
	b.Events = make([]*pb.KvEvent, 0, len(spans))
	for i, sp := range spans {
		dc.event = i
		ev, enc, dem, err := dc.decodeEvent(sp)
		if err != nil {
			return nil, err
		}
		if dem != nil {
			b.Demoted = append(b.Demoted, *dem)
		}
		switch {
		case b.Encoding == "":
			b.Encoding = enc
		case b.Encoding != enc:
			b.Encoding = EncodingMixed
		}
		b.Events = append(b.Events, ev)
	}
	return b, nil
}

// arrayBatch reads a positional batch, [ts, events, dp_rank?, ...]: what
// msgspec writes for vLLM's EventBatch while it is declared array_like (every
// release up to the last one checked, v0.26). Elements past the third are
// skipped.
func (dc *decoder) arrayBatch(b *Batch) ([]span, error) {
	n, err := dc.arrayLen()
	if err != nil {
		return nil, err
	}
	if n < 2 {
		return nil, dc.fail(ReasonBatchLength, 0, fmt.Errorf("batch has %d elements, want [ts, events] or [ts, events, dp_rank]", n))
	}
	if b.TimeUnixNano, err = dc.timestamp(); err != nil {
		return nil, err
	}
	spans, err := dc.eventSpans()
	if err != nil {
		return nil, err
	}
	if n >= 3 {
		if err := dc.rank(b); err != nil {
			return nil, err
		}
	}
	for i := 3; i < n; i++ { // later batch fields: kept in the raw payload only
		if err := dc.skip(1); err != nil {
			return nil, err
		}
	}
	return spans, nil
}

// mapBatch reads a batch whose fields are keyed by name, {"ts", "events",
// "data_parallel_rank"}: what msgspec writes for an EventBatch struct that is
// not array_like, as vLLM's source declares it once its events became maps.
// ts and events must be there, each once; other keys are skipped.
func (dc *decoder) mapBatch(b *Batch) ([]span, error) {
	n, err := dc.mapLen()
	if err != nil {
		return nil, err
	}
	var spans []span
	hasTS, hasEvents, hasRank := false, false, false
	for i := 0; i < n; i++ {
		off := dc.off()
		kc, err := dc.peek()
		if err != nil {
			return nil, err
		}
		if !msgpcode.IsString(kc) { // no field of any engine: skip key and value
			if err := dc.skip(1); err != nil {
				return nil, err
			}
			if err := dc.skip(1); err != nil {
				return nil, err
			}
			continue
		}
		key, err := dc.rawBytes()
		if err != nil {
			return nil, err
		}
		var seen *bool
		switch string(key) {
		case "ts":
			seen = &hasTS
		case "events":
			seen = &hasEvents
		case "data_parallel_rank":
			seen = &hasRank
		}
		if seen != nil && *seen {
			return nil, dc.fail(ReasonBatchLength, off, fmt.Errorf("batch key %q appears twice", key))
		}
		switch string(key) {
		case "ts":
			b.TimeUnixNano, err = dc.timestamp()
		case "events":
			spans, err = dc.eventSpans()
		case "data_parallel_rank":
			err = dc.rank(b)
		default: // a later batch field: kept in the raw payload only
			err = dc.skip(1)
		}
		if err != nil {
			return nil, err
		}
		if seen != nil {
			*seen = true
		}
	}
	if !hasTS || !hasEvents {
		return nil, dc.fail(ReasonBatchLength, 0, fmt.Errorf("batch map has ts %v and events %v, want both", hasTS, hasEvents))
	}
	return spans, nil
}

// eventSpans reads the events array and returns where each event lies; the
// events are decoded once the whole batch is known to be well formed.
func (dc *decoder) eventSpans() ([]span, error) {
	evOff := dc.off()
	c, err := dc.peek()
	if err != nil {
		return nil, err
	}
	if !isArray(c) {
		return nil, dc.fail(ReasonEvents, evOff, fmt.Errorf("events element starts with 0x%02x, want an array", c))
	}
	m, err := dc.arrayLen()
	if err != nil {
		return nil, err
	}
	spans := make([]span, m)
	for i := range spans {
		s := dc.off()
		dc.event = i
		if err := dc.skip(1); err != nil {
			return nil, err
		}
		spans[i] = span{s, dc.off()}
	}
	dc.event = -1
	return spans, nil
}

// timestamp reads element 0: float seconds since the epoch (msgspec writes
// float64; float32 and integers are accepted too).
func (dc *decoder) timestamp() (int64, error) {
	off := dc.off()
	c, err := dc.peek()
	if err != nil {
		return 0, err
	}
	var ts float64
	switch {
	case c == msgpcode.Nil:
		dc.pos++
		return 0, nil
	case c == msgpcode.Float || c == msgpcode.Double:
		ts, err = dc.readFloat()
	case isUint(c):
		var u uint64
		u, err = dc.readUint()
		ts = float64(u)
	case isInt(c):
		var v int64
		v, err = dc.readInt()
		ts = float64(v)
	default:
		return 0, dc.fail(ReasonTimestamp, off, fmt.Errorf("timestamp has msgpack code 0x%02x, want a number", c))
	}
	if err != nil {
		return 0, dc.fail(ReasonTimestamp, off, err)
	}
	// The comparison is written so NaN fails it too. The bound keeps
	// sec*1e9 far inside int64 (which ends in 2262), so the conversion
	// below cannot wrap to a negative time.
	if !(ts >= 0 && ts < MaxTimestampSeconds) {
		return 0, dc.fail(ReasonTimestamp, off, fmt.Errorf("timestamp %v is not seconds since 1970 before 2100", ts))
	}
	sec := math.Floor(ts)
	return int64(sec)*1e9 + int64(math.Round((ts-sec)*1e9)), nil
}

func (dc *decoder) rank(b *Batch) error {
	off := dc.off()
	c, err := dc.peek()
	if err != nil {
		return err
	}
	if c == msgpcode.Nil {
		dc.pos++
		return nil
	}
	if !isUint(c) && !isInt(c) {
		return dc.fail(ReasonDPRank, off, fmt.Errorf("dp rank has msgpack code 0x%02x, want an int or nil", c))
	}
	u, neg, err := dc.integer()
	if err != nil {
		return dc.fail(ReasonDPRank, off, err)
	}
	if neg || u > math.MaxUint32 {
		return dc.fail(ReasonDPRank, off, fmt.Errorf("dp rank %d out of range", int64(u)))
	}
	b.DPRank, b.HasDPRank = uint32(u), true
	return nil
}

// integer reads any msgpack integer; neg reports a negative value whose
// two's complement bits are u.
func (dc *decoder) integer() (u uint64, neg bool, err error) {
	c, err := dc.peek()
	if err != nil {
		return 0, false, err
	}
	switch {
	case isUint(c):
		u, err = dc.readUint()
		return u, false, err
	case isInt(c):
		v, err := dc.readInt()
		return uint64(v), v < 0, err
	}
	return 0, false, fmt.Errorf("msgpack code 0x%02x is not an integer", c)
}

// decodeEvent decodes the event at sp. It returns the event, its encoding,
// and a demotion if the event was turned into an UnknownEvent.
func (dc *decoder) decodeEvent(sp span) (*pb.KvEvent, string, *Demotion, error) {
	dc.seek(sp.start)
	dc.field = ""
	c, err := dc.peek()
	if err != nil {
		return nil, "", nil, err
	}
	var (
		f   fieldSet
		tag string
		enc string
	)
	switch {
	case isArray(c):
		enc = EncodingPositional
		n, err := dc.arrayLen()
		if err != nil {
			return nil, "", nil, err
		}
		if n == 0 {
			return nil, "", nil, dc.fail(ReasonTag, sp.start, errors.New("positional event without a tag"))
		}
		elems := make([]span, n)
		for i := range elems {
			s := dc.off()
			if err := dc.skip(2); err != nil {
				return nil, "", nil, err
			}
			elems[i] = span{s, dc.off()}
		}
		dc.seek(elems[0].start)
		if tag, err = dc.str("tag"); err != nil {
			return nil, "", nil, dc.retag(err)
		}
		layout := dc.layout(tag)
		if tag == TagBlockStoredWithMetadata && len(elems) > 5 {
			// SGLang appends the metadata (cache_salt) after the fields it
			// has; it is kept in the raw payload, not read.
			elems = elems[:len(elems)-1]
		}
		for i, sp := range elems {
			if i < len(layout) && layout[i] != fSkip {
				f.has[layout[i]], f.at[layout[i]] = true, sp
			}
		}
	case isMap(c):
		enc = EncodingMap
		n, err := dc.mapLen()
		if err != nil {
			return nil, "", nil, err
		}
		hasTag := false
		for i := 0; i < n; i++ {
			kc, err := dc.peek()
			if err != nil {
				return nil, "", nil, err
			}
			if !msgpcode.IsString(kc) { // not a field of any engine: skip key and value
				if err := dc.skip(2); err != nil {
					return nil, "", nil, err
				}
				if err := dc.skip(2); err != nil {
					return nil, "", nil, err
				}
				continue
			}
			// Keys are compared as bytes: no string per key and event.
			key, err := dc.rawBytes()
			if err != nil {
				return nil, "", nil, err
			}
			vs := dc.off()
			if string(key) == "type" {
				if tag, err = dc.str("type"); err != nil {
					return nil, "", nil, dc.retag(err)
				}
				hasTag = true
				continue
			}
			if err := dc.skip(2); err != nil {
				return nil, "", nil, err
			}
			if id, ok := mapFieldByID[string(key)]; ok {
				f.has[id], f.at[id] = true, span{vs, dc.off()}
			}
		}
		if !hasTag {
			tag = ""
		}
	default:
		return nil, "", nil, dc.fail(ReasonEventShape, sp.start, fmt.Errorf("event starts with 0x%02x, want an array or a map", c))
	}
	switch tag {
	case TagBlockStored, TagBlockStoredWithMetadata:
		ev, reason, err := dc.stored(&f)
		if err != nil {
			return nil, "", nil, err
		}
		if reason != "" {
			return unknown(tag), enc, &Demotion{Event: dc.event, Tag: tag, Reason: reason}, nil
		}
		return &pb.KvEvent{Event: &pb.KvEvent_Stored{Stored: ev}}, enc, nil, nil
	case TagBlockRemoved:
		ev, reason, err := dc.removed(&f)
		if err != nil {
			return nil, "", nil, err
		}
		if reason != "" {
			return unknown(tag), enc, &Demotion{Event: dc.event, Tag: tag, Reason: reason}, nil
		}
		return &pb.KvEvent{Event: &pb.KvEvent_Removed{Removed: ev}}, enc, nil, nil
	case TagAllBlocksCleared:
		return &pb.KvEvent{Event: &pb.KvEvent_Cleared{Cleared: &pb.AllBlocksCleared{}}}, enc, nil, nil
	}
	return unknown(tag), enc, nil, nil
}

func unknown(tag string) *pb.KvEvent {
	return &pb.KvEvent{Event: &pb.KvEvent_Unknown{Unknown: &pb.UnknownEvent{Tag: tag}}}
}

// retag turns a field error on the tag into a tag error.
func (dc *decoder) retag(err error) error {
	var de *DecodeError
	if errors.As(err, &de) && de.Reason == ReasonField {
		de.Reason = ReasonTag
	}
	return err
}

func (dc *decoder) layout(tag string) []int {
	sgl := dc.engine == pb.Engine_ENGINE_SGLANG
	switch tag {
	case TagBlockStored, TagBlockStoredWithMetadata:
		if sgl {
			return sglStored
		}
		return vllmStored
	case TagBlockRemoved:
		if sgl {
			return sglRemoved
		}
		return vllmRemoved
	}
	return nil
}

// at positions the reader on field id; ok is false if the field is absent
// or nil (the same thing for every field we read).
func (dc *decoder) at(f *fieldSet, id int) (bool, error) {
	dc.field = fieldNames[id]
	if !f.has[id] {
		return false, nil
	}
	dc.seek(f.at[id].start)
	c, err := dc.peek()
	if err != nil {
		return false, err
	}
	if c == msgpcode.Nil {
		return false, nil
	}
	return true, nil
}

// rawBytes reads a str or bin value without copying: the returned slice
// aliases the payload.
func (dc *decoder) rawBytes() ([]byte, error) {
	off := dc.off()
	n, err := dc.readBytesLen()
	if err != nil {
		return nil, dc.fail(ReasonField, off, err)
	}
	if n < 0 || n > dc.left() {
		return nil, dc.fail(ReasonTruncated, off, fmt.Errorf("string of %d bytes, only %d left", n, dc.left()))
	}
	s := dc.off()
	dc.seek(s + n)
	return dc.buf[s : s+n], nil
}

func (dc *decoder) str(what string) (string, error) {
	off := dc.off()
	c, err := dc.peek()
	if err != nil {
		return "", err
	}
	if !msgpcode.IsString(c) {
		return "", dc.fail(ReasonField, off, fmt.Errorf("%s has msgpack code 0x%02x, want a string", what, c))
	}
	b, err := dc.rawBytes()
	if err != nil {
		return "", err
	}
	// Protobuf strings must be UTF-8, and msgpack does not promise it: an
	// invalid byte would make the record unwritable, so it is replaced.
	return strings.ToValidUTF8(string(b), "\uFFFD"), nil
}

func (dc *decoder) optString(f *fieldSet, id int) (string, error) {
	ok, err := dc.at(f, id)
	if !ok || err != nil {
		return "", err
	}
	return dc.str(fieldNames[id])
}

// hash reads one engine block hash: an unsigned or signed integer of any
// width, or a byte string (bin or str), normalized to uint64.
func (dc *decoder) hash() (uint64, error) {
	off := dc.off()
	c, err := dc.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case isUint(c) || isInt(c):
		u, _, err := dc.integer()
		if err != nil {
			return 0, dc.fail(ReasonField, off, err)
		}
		return u, nil
	case msgpcode.IsBin(c) || msgpcode.IsString(c):
		b, err := dc.rawBytes()
		if err != nil {
			return 0, err
		}
		return HashFromBytes(b), nil
	}
	return 0, dc.fail(ReasonField, off, fmt.Errorf("hash has msgpack code 0x%02x, want an integer or bytes", c))
}

func (dc *decoder) hashes(f *fieldSet, id int) ([]uint64, error) {
	ok, err := dc.at(f, id)
	if !ok || err != nil {
		return nil, err
	}
	off := dc.off()
	c, _ := dc.peek()
	if !isArray(c) {
		return nil, dc.fail(ReasonField, off, fmt.Errorf("msgpack code 0x%02x, want an array of hashes", c))
	}
	n, err := dc.arrayLen()
	if err != nil {
		return nil, err
	}
	hs := make([]uint64, n)
	for i := range hs {
		if hs[i], err = dc.hash(); err != nil {
			return nil, err
		}
	}
	return hs, nil
}

// optInt reads an optional integer field as int64; a value outside
// [lo, hi] is a field error.
func (dc *decoder) optInt(f *fieldSet, id int, lo, hi int64) (int64, bool, error) {
	ok, err := dc.at(f, id)
	if !ok || err != nil {
		return 0, false, err
	}
	off := dc.off()
	u, neg, err := dc.integer()
	if err != nil {
		return 0, false, dc.fail(ReasonField, off, err)
	}
	if (!neg && u > math.MaxInt64) || int64(u) < lo || int64(u) > hi {
		return 0, false, dc.fail(ReasonField, off, fmt.Errorf("value out of range [%d, %d]", lo, hi))
	}
	return int64(u), true, nil
}

// tokens reads token_ids. A token id that does not fit uint32 is not a type
// error (the batch is fine) but demotes the event: inRange is false.
func (dc *decoder) tokens(f *fieldSet) (ts []uint32, inRange bool, err error) {
	ok, err := dc.at(f, fTokens)
	if !ok || err != nil {
		return nil, true, err
	}
	off := dc.off()
	c, _ := dc.peek()
	if !isArray(c) {
		return nil, false, dc.fail(ReasonField, off, fmt.Errorf("msgpack code 0x%02x, want an array of token ids", c))
	}
	n, err := dc.arrayLen()
	if err != nil {
		return nil, false, err
	}
	ts = make([]uint32, n)
	inRange = true
	for i := range ts {
		off := dc.off()
		u, neg, err := dc.integer()
		if err != nil {
			return nil, false, dc.fail(ReasonField, off, err)
		}
		if neg || u > math.MaxUint32 {
			inRange = false
			continue
		}
		ts[i] = uint32(u)
	}
	return ts, inRange, nil
}

func (dc *decoder) stored(f *fieldSet) (*pb.BlockStored, string, error) {
	s := &pb.BlockStored{}
	var err error
	if s.BlockHashes, err = dc.hashes(f, fHashes); err != nil {
		return nil, "", err
	}
	if ok, err := dc.at(f, fParent); err != nil {
		return nil, "", err
	} else if ok {
		p, err := dc.hash()
		if err != nil {
			return nil, "", err
		}
		s.ParentBlockHash = &p
	}
	toks, inRange, err := dc.tokens(f)
	if err != nil {
		return nil, "", err
	}
	s.TokenIds = toks
	bs, hasBS, err := dc.optInt(f, fBlockSize, math.MinInt64, math.MaxInt64)
	if err != nil {
		return nil, "", err
	}
	if lora, ok, err := dc.optInt(f, fLoraID, math.MinInt64, math.MaxInt64); err != nil {
		return nil, "", err
	} else if ok {
		s.LoraId = &lora
	}
	if s.Medium, err = dc.optString(f, fMedium); err != nil {
		return nil, "", err
	}
	s.Tier = events.TierOf(s.Medium)
	if s.LoraName, err = dc.optString(f, fLoraName); err != nil {
		return nil, "", err
	}
	if g, ok, err := dc.optInt(f, fGroupIdx, math.MinInt32, math.MaxInt32); err != nil {
		return nil, "", err
	} else if ok {
		g32 := int32(g)
		s.GroupIdx = &g32
	}
	dc.field = ""
	if len(s.BlockHashes) > 0 && events.IsOffloadStore(s) {
		// vLLM's offloading connector: blocks named by their GPU hashes
		// only, which the state resolves through the worker's engine
		// table. The block size (0 in vLLM's later placeholder events) and
		// a parent are not used, so the size is only bounded.
		if hasBS && (bs < 0 || bs > events.MaxBlockSize) {
			return nil, DemoteBlockSize, nil
		}
		s.BlockSize = uint32(max(bs, 0))
		s.ParentBlockHash = nil
		return s, "", nil
	}
	switch {
	case len(s.BlockHashes) == 0:
		return nil, DemoteNoHashes, nil
	case !hasBS || bs < 1 || bs > events.MaxBlockSize:
		return nil, DemoteBlockSize, nil
	case !inRange:
		return nil, DemoteTokenRange, nil
	case int64(len(s.TokenIds)) != int64(len(s.BlockHashes))*bs:
		return nil, DemoteTokenCount, nil
	}
	s.BlockSize = uint32(bs)
	return s, "", nil
}

func (dc *decoder) removed(f *fieldSet) (*pb.BlockRemoved, string, error) {
	r := &pb.BlockRemoved{}
	var err error
	if r.BlockHashes, err = dc.hashes(f, fHashes); err != nil {
		return nil, "", err
	}
	if r.Medium, err = dc.optString(f, fMedium); err != nil {
		return nil, "", err
	}
	r.Tier = events.TierOf(r.Medium)
	if g, ok, err := dc.optInt(f, fGroupIdx, math.MinInt32, math.MaxInt32); err != nil {
		return nil, "", err
	} else if ok {
		g32 := int32(g)
		r.GroupIdx = &g32
	}
	dc.field = ""
	if len(r.BlockHashes) == 0 {
		return nil, DemoteNoHashes, nil
	}
	return r, "", nil
}
