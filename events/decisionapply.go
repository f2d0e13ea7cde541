package events

import (
	"encoding/binary"
	"errors"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Applying a decision record on a replica that did not make it.
//
// Every replica applies every decision of its group, so the CPU a replica
// spends on a peer's decision caps the group (docs/scaling.md): a group
// of N replicas spends a + (N−1)·p per decision, a on the replica that
// answered and p on each other one. The candidate table is ~90% of a
// record's bytes (a row per worker: 160 rows in a fleet of 128 decode and
// 32 prefill workers), the header holds a watermark of every partition,
// and decoding both into messages was most of p; yet the apply rules read
// ten scalar fields, at most a few rows (the decode worker's, for its
// block size, and the prefill worker's, for its device overlap; the
// latency model, statestore/latency.go, reads its features from these
// same two rows) and one hash chain, the one at that block size. What a replica stores of the
// record, its header, it can take from the record's bytes as they are.
//
// UnmarshalDecisionForApply therefore decodes those fields, rows and chain
// only, finds the rows by their first two fields without decoding the
// rest, and returns the header as bytes. The header it checks field by
// field as proto.Unmarshal would (well-formed wire data, valid UTF-8), and
// the rows and chain it decodes are decoded by proto.Unmarshal; the other
// rows and chains it only frames. So it accepts every value proto.Unmarshal
// accepts, with the same header and fields, and may accept a record whose
// unread rows are malformed: every replica reads such a record (never one
// pdrouter writes) by this same rule, and explain, which decodes the whole
// record, reports it. FuzzUnmarshalDecisionForApply holds these
// properties.

// UnmarshalDecisionForApply decodes a DecisionRecord value as the state's
// apply rules need it. The record it returns holds:
//
//   - the fields the apply rules and validation read (ApplyFields), as
//     proto.Unmarshal decodes them;
//   - of the table, the rows of the decode worker in the decode pool and of
//     the prefill worker in the prefill pool, in their order;
//   - of the chains, all of them when keepChains, else the first at the
//     block size of the first of those decode rows that has one (the first
//     chain when none has).
//
// header is the value without its table and, unless keepChains, its chains
// (field 19 and 20): for a record pdrouter wrote, exactly
// MarshalDecisionHeader of the whole record.
func UnmarshalDecisionForApply(v []byte, keepChains bool) (d *pb.DecisionRecord, header []byte, err error) {
	// First pass: check every field but the table and the chains, and
	// decode the few the apply rules read, whose workers say which rows
	// to keep (a hostile record may put them after the table).
	apply := make([]byte, 0, 256)
	// The header is taken in the same pass: every top-level field but the
	// candidates and, unless kept, the chains, in the record's order, as
	// appendStrippedDecision writes it (by field number, whatever the wire
	// type, so a malformed bulk field is dropped from the header too).
	header = make([]byte, 0, 1024)
	for b := v; len(b) > 0; {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return nil, nil, protowire.ParseError(n)
		}
		m := consumeValue(num, typ, b[n:])
		if m < 0 {
			return nil, nil, protowire.ParseError(m)
		}
		field := b[:n+m]
		b = b[n+m:]
		if num != decisionCandidatesField && (num != decisionChainsField || keepChains) {
			header = append(header, field...)
		}
		if isBulk(num, typ) {
			continue
		}
		if !wellFormed(field, decisionShape) {
			return nil, nil, errHeaderMalformed
		}
		if isApplyField(num, typ) {
			apply = append(apply, field...)
		}
	}
	d = &pb.DecisionRecord{}
	if err := proto.Unmarshal(apply, d); err != nil {
		return nil, nil, err // unreachable: wellFormed checked it
	}
	// Second pass: the table and the chains (the first pass checked their
	// framing), in their order. A row is decoded, and so checked, only if
	// it is one the apply rules read; a chain only if it is the one.
	dw, pw := d.GetDecodeWorker(), d.GetPrefillWorker()
	bs := uint32(0)
	var chains []byte // the chains field values, still framed, when !keepChains
	for b := v; len(b) > 0; {
		num, typ, n := consumeTag(b)
		m := consumeValue(num, typ, b[n:])
		field := b[:n+m]
		b = b[n+m:]
		if !isBulk(num, typ) {
			continue
		}
		val, _ := protowire.ConsumeBytes(field[n:])
		if num == decisionChainsField {
			if keepChains {
				if err := appendChain(d, val); err != nil {
					return nil, nil, err
				}
			} else if chains == nil {
				chains = field[:len(field):len(field)]
			} else {
				chains = append(chains, field...)
			}
			continue
		}
		who, ok := rowIdentityOf(val)
		if !ok {
			return nil, nil, errBulkMalformed
		}
		decodeRow := who.pool == pb.Pool_POOL_DECODE && who.is(dw)
		prefillRow := pw != nil && who.pool == pb.Pool_POOL_PREFILL && who.is(pw)
		if !decodeRow && !prefillRow {
			continue
		}
		c := &pb.Candidate{}
		if err := proto.Unmarshal(val, c); err != nil {
			return nil, nil, err
		}
		if decodeRow && bs == 0 {
			bs = c.GetBlockSize()
		}
		d.Candidates = append(d.Candidates, c)
	}
	// The chain the apply rules read: the first at bs (the first of all
	// when bs is 0). Chains were collected until the rows were all seen,
	// since a row may follow them.
	for b := chains; len(b) > 0; {
		_, _, n := consumeTag(b)
		val, m := protowire.ConsumeBytes(b[n:])
		b = b[n+m:]
		if cbs, ok := hashChainBlockSize(val); !ok {
			return nil, nil, errBulkMalformed
		} else if bs == 0 || cbs == bs {
			if err := appendChain(d, val); err != nil {
				return nil, nil, err
			}
			break
		}
	}
	return d, header, nil
}

// ApplyFields are the DecisionRecord fields UnmarshalDecisionForApply
// decodes: what the state's apply rules, its latency model and the
// record's validation read. A field any of them reads that is missing here
// makes a peer's state differ from the deciding replica's
// (TestPeerDecisionAppliesAsOwn in statestore).
var ApplyFields = []protoreflect.Name{"decision_id", "request_id", "prompt_tokens", "mode", "decode_worker",
	"prefill_worker", "effective_isl", "block_size", "decided_at_unix_nano", "replica_id"}

// applyFieldKinds maps the numbers of ApplyFields to the wire type the
// generic decoder reads them with; another wire type is an unknown field,
// which the partial record leaves out.
var applyFieldKinds = func() map[protowire.Number]protowire.Type {
	fds := (&pb.DecisionRecord{}).ProtoReflect().Descriptor().Fields()
	m := map[protowire.Number]protowire.Type{}
	for _, name := range ApplyFields {
		fd := fds.ByName(name)
		switch fd.Kind() {
		case protoreflect.StringKind, protoreflect.MessageKind:
			m[fd.Number()] = protowire.BytesType
		default:
			m[fd.Number()] = protowire.VarintType
		}
	}
	return m
}()

func isApplyField(num protowire.Number, typ protowire.Type) bool {
	want, ok := applyFieldKinds[num]
	return ok && want == typ
}

// isBulk reports whether a top-level field is a row of the table or a
// chain, as the generic decoder reads them.
func isBulk(num protowire.Number, typ protowire.Type) bool {
	return (num == decisionCandidatesField || num == decisionChainsField) && typ == protowire.BytesType
}

// appendChain decodes a HashChain into d's chains. By hand: the generic
// decoder grows the hashes a few at a time, and a chain is thousands of
// them. It decodes block_size, block_hashes (packed or not) and
// omitted_blocks as the generic decoder does, the last value of a scalar
// winning, and refuses what it would refuse; other fields it skips
// (the generic decoder would keep them as unknown fields, which no apply
// rule reads).
func appendChain(d *pb.DecisionRecord, val []byte) error {
	n, ok := walkChain(val, nil, nil)
	if !ok {
		return errBulkMalformed
	}
	c := &pb.HashChain{}
	if n > 0 {
		c.BlockHashes = make([]uint64, 0, n)
	}
	walkChain(val, c, &c.BlockHashes)
	d.Chains = append(d.Chains, c)
	return nil
}

// walkChain walks a HashChain's encoding: it counts the hashes and, with
// c, fills c's scalars, appends the hashes to hs and keeps every other field
// as an unknown field of c, in order, as proto.Unmarshal does (a field of a
// later schema, or a known number with another wire type), so that a chain
// read for apply is the chain the record holds.
func walkChain(b []byte, c *pb.HashChain, hs *[]uint64) (int, bool) {
	count := 0
	var unknown []byte
	for len(b) > 0 {
		field := b
		num, typ, n := consumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		m := consumeValue(num, typ, b)
		if m < 0 {
			return 0, false
		}
		field = field[:n+m]
		switch {
		case num == 2 && typ == protowire.BytesType:
			packed, _ := protowire.ConsumeBytes(b)
			if len(packed)%8 != 0 {
				return 0, false
			}
			count += len(packed) / 8
			if hs != nil {
				*hs = appendPacked(*hs, packed)
			}
		case num == 2 && typ == protowire.Fixed64Type:
			count++
			if hs != nil {
				*hs = append(*hs, binary.LittleEndian.Uint64(b))
			}
		case (num == 1 || num == 3) && typ == protowire.VarintType && c != nil:
			x, _ := protowire.ConsumeVarint(b)
			if num == 1 {
				c.BlockSize = uint32(x)
			} else {
				c.OmittedBlocks = uint32(x)
			}
		default:
			if c != nil {
				unknown = append(unknown, field...)
			}
		}
		b = b[m:]
	}
	if len(unknown) > 0 {
		c.ProtoReflect().SetUnknown(unknown)
	}
	return count, true
}

// appendPacked appends the fixed64 values of a packed field to hs, in one
// growth and one pass: a chain is thousands of them, and appending them one
// at a time through a pointer cost ~8 ns each.
func appendPacked(hs []uint64, packed []byte) []uint64 {
	n := len(hs)
	hs = slices.Grow(hs, len(packed)/8)[:n+len(packed)/8]
	dst := hs[n:]
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint64(packed[8*i : 8*i+8])
	}
	return hs
}

// rowIdentity is a Candidate's pool and worker (rowIdentityOf).
type rowIdentity struct {
	pool pb.Pool
	id   []byte
	rank uint32
}

func (r *rowIdentity) is(w *pb.WorkerRef) bool {
	return string(r.id) == w.GetWorkerId() && r.rank == w.GetDpRank()
}

// workerRef reads the fields of a WorkerRef into r, the last value of
// each winning; false when its encoding is malformed.
func (r *rowIdentity) workerRef(b []byte) bool {
	// As rowIdentityOf: the id alone, or the id then a short rank, without
	// the loop's calls.
	if len(b) > 1 && b[0] == 0x0a && b[1] < 0x80 {
		if n := 2 + int(b[1]); n == len(b) {
			r.id = b[2:n]
			return true
		} else if n+2 == len(b) && b[n] == 0x10 && b[n+1] < 0x80 {
			r.id, r.rank = b[2:n], uint32(b[n+1])
			return true
		}
	}
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		m := consumeValue(num, typ, b)
		if m < 0 {
			return false
		}
		switch {
		case num == 1 && typ == protowire.BytesType:
			r.id, _ = protowire.ConsumeBytes(b)
		case num == 2 && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(b)
			r.rank = uint32(x)
		}
		b = b[m:]
	}
	return true
}

// consumeTag is protowire.ConsumeTag with a fast path for the one-byte
// tags (field numbers below 16) that make up the table. It refuses a field
// number past protowire.MaxValidNumber, as proto.Unmarshal does and
// protowire.ConsumeTag does not.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	if len(b) > 0 && b[0] < 0x80 && b[0]>>3 != 0 {
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, errCodeFieldNumber
	}
	return num, typ, n
}

// errCodeFieldNumber is the negative length protowire's Consume functions
// return for an invalid field number (protowire.ParseError reads it).
const errCodeFieldNumber = -2

// consumeValue is protowire.ConsumeFieldValue with fast paths for the
// common short values.
func consumeValue(num protowire.Number, typ protowire.Type, b []byte) int {
	switch typ {
	case protowire.VarintType:
		if len(b) > 0 && b[0] < 0x80 {
			return 1
		}
	case protowire.Fixed64Type:
		if len(b) >= 8 {
			return 8
		}
	case protowire.Fixed32Type:
		if len(b) >= 4 {
			return 4
		}
	case protowire.BytesType:
		if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
			return 1 + int(b[0])
		}
	}
	return protowire.ConsumeFieldValue(num, typ, b)
}

var (
	decisionShape      = shapeOf((&pb.DecisionRecord{}).ProtoReflect().Descriptor())
	errHeaderMalformed = errors.New("proto: the decision record holds invalid wire-format data or invalid UTF-8")
	errBulkMalformed   = errors.New("proto: the candidate table or the hash chains hold invalid wire-format data or invalid UTF-8")
)

// hashChainBlockSize reads a HashChain's block_size (field 1, last value
// wins); ok is false when its encoding is malformed.
func hashChainBlockSize(val []byte) (bs uint32, ok bool) {
	for b := val; len(b) > 0; {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			x, _ := protowire.ConsumeVarint(b)
			bs = uint32(x)
		}
		m := consumeValue(num, typ, b)
		if m < 0 {
			return 0, false
		}
		b = b[m:]
	}
	return bs, true
}

// rowIdentityOf reads a Candidate's pool (field 2) and worker (field 1)
// from its first occurrences, and stops there: a row pdrouter writes
// starts with them, so telling the rows the apply rules read from the
// others costs two fields a row, whatever the row holds. (The generic
// decoder would let a later occurrence win; a record with two is not one
// pdrouter writes, and every replica reads it by this same rule.) ok is
// false when the fields it walks are malformed.
func rowIdentityOf(row []byte) (who rowIdentity, ok bool) {
	// The rows pdrouter writes start with a short worker (field 1) and the
	// pool (field 2), which is what the loop below reads first and then
	// stops at: read them without its calls. A table is a row per worker,
	// so this is most of the cost of a peer's table.
	if len(row) > 2 && row[0] == 0x0a && row[1] < 0x80 && int(row[1])+3 < len(row) {
		ref, rest := row[2:2+row[1]], row[2+row[1]:]
		if rest[0] == 0x10 && rest[1] < 0x80 {
			who.pool = pb.Pool(rest[1])
			return who, who.workerRef(ref)
		}
	}
	seenWorker, seenPool := false, false
	for b := row; len(b) > 0 && !(seenWorker && seenPool); {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return who, false
		}
		b = b[n:]
		m := consumeValue(num, typ, b)
		if m < 0 {
			return who, false
		}
		switch {
		case num == 1 && typ == protowire.BytesType && !seenWorker:
			// The worker id needs no UTF-8 check: it is compared with the
			// decision's workers, valid strings, and the row is decoded
			// (and checked) only if it is equal.
			ref, _ := protowire.ConsumeBytes(b)
			if !who.workerRef(ref) {
				return who, false
			}
			seenWorker = true
		case num == 2 && typ == protowire.VarintType && !seenPool:
			x, _ := protowire.ConsumeVarint(b)
			who.pool, seenPool = pb.Pool(int32(x)), true
		}
		b = b[m:]
	}
	return who, true
}

// wellFormed reports whether proto.Unmarshal would accept b as a message
// of shape sh, without building it: each field well-formed on the wire,
// known fields of their expected wire type checked as their kind (strings
// valid UTF-8, packed lists whole, nested messages recursively), others
// skipped as unknown fields are.
func wellFormed(b []byte, sh *wireShape) bool {
	for len(b) > 0 {
		// consumeTag and consumeValue, by hand: the walk is most of the
		// cost and they do not inline.
		var num protowire.Number
		var typ protowire.Type
		if c := b[0]; c < 0x80 && c>>3 != 0 {
			num, typ, b = protowire.Number(c>>3), protowire.Type(c&7), b[1:]
		} else {
			var n int
			if num, typ, n = consumeTag(b); n < 0 {
				return false
			}
			b = b[n:]
		}
		m := -1
		switch {
		case typ == protowire.VarintType:
			// Up to 9 bytes a varint cannot overflow; past them, or cut
			// short, protowire says how it fails.
			for i := 0; i < len(b) && i < 9; i++ {
				if b[i] < 0x80 {
					m = i + 1
					break
				}
			}
			if m < 0 {
				if m = protowire.ConsumeFieldValue(num, typ, b); m < 0 {
					return false
				}
			}
		case typ == protowire.Fixed64Type && len(b) >= 8:
			m = 8
		case typ == protowire.Fixed32Type && len(b) >= 4:
			m = 4
		case typ == protowire.BytesType && len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b):
			m = 1 + int(b[0])
		default:
			if m = protowire.ConsumeFieldValue(num, typ, b); m < 0 {
				return false
			}
		}
		if typ == protowire.BytesType && int(num) < len(sh.fields) {
			if f := &sh.fields[num]; f.check != checkNone {
				val, _ := protowire.ConsumeBytes(b)
				if !f.wellFormed(val) {
					return false
				}
			}
		}
		b = b[m:]
	}
	return true
}

// wireShape is what wellFormed needs of a message descriptor, indexed by
// field number: resolved once, since a descriptor lookup per field cost
// more than the walk itself.
type wireShape struct {
	fields []fieldShape
}

type fieldShape struct {
	check fieldCheck
	msg   *wireShape // checkMessage
}

type fieldCheck uint8

const (
	checkNone         fieldCheck = iota // bytes, or a scalar sent length-delimited: an unknown field
	checkString                         // valid UTF-8
	checkMessage                        // recursively
	checkPacked32                       // whole fixed32 elements
	checkPacked64                       // whole fixed64 elements
	checkPackedVarint                   // whole varint elements
)

func (f *fieldShape) wellFormed(val []byte) bool {
	switch f.check {
	case checkString:
		return utf8.Valid(val)
	case checkMessage:
		return wellFormed(val, f.msg)
	case checkPacked32:
		return len(val)%4 == 0
	case checkPacked64:
		return len(val)%8 == 0
	case checkPackedVarint:
		for len(val) > 0 {
			_, n := protowire.ConsumeVarint(val)
			if n < 0 {
				return false
			}
			val = val[n:]
		}
	}
	return true
}

// shapeOf resolves md's shape. The schema has no recursive message, so the
// recursion ends.
func shapeOf(md protoreflect.MessageDescriptor) *wireShape {
	fds := md.Fields()
	maxNum := 0
	for i := range fds.Len() {
		maxNum = max(maxNum, int(fds.Get(i).Number()))
	}
	sh := &wireShape{fields: make([]fieldShape, maxNum+1)}
	for i := range fds.Len() {
		fd := fds.Get(i)
		f := &sh.fields[fd.Number()]
		switch fd.Kind() {
		case protoreflect.MessageKind:
			f.check, f.msg = checkMessage, shapeOf(fd.Message())
		case protoreflect.StringKind:
			f.check = checkString
		case protoreflect.BytesKind, protoreflect.GroupKind:
		case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
			if fd.IsList() {
				f.check = checkPacked32
			}
		case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
			if fd.IsList() {
				f.check = checkPacked64
			}
		default:
			if fd.IsList() {
				f.check = checkPackedVarint
			}
		}
	}
	return sh
}
