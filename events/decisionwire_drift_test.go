package events

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// The hand-written DecisionRecord encoder (decisionwire.go) lists the
// schema's fields in code. The tests here read the list from the schema
// instead: they walk the descriptor of DecisionRecord and of every message
// under it, so a field added to decisions.proto (or common.proto) and not
// to the encoder fails them, rather than being dropped from every audit
// record without a sound. TestDecisionWireMatchesProto, on random records,
// only sees the fields randomDecision knows of.

// maxFillDepth bounds fillEvery on a recursive message type.
const maxFillDepth = 8

// fillEvery sets every field of m, and of every message under it, to a
// value that is not its default and differs from field to field (n counts
// the values handed out), so a field left out, swapped with another or
// written with the wrong wire type changes the encoding. Repeated fields get
// two elements, signed integers negative values (sign extension), unsigned
// ones multi-byte varints, strings non-ASCII text. In a oneof only the first
// member is set.
func fillEvery(m protoreflect.Message, n *int, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() && m.WhichOneof(o) != nil {
			continue
		}
		if fd.Message() != nil && depth >= maxFillDepth {
			continue
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			k := fillScalar(fd.MapKey(), n).MapKey()
			if vd := fd.MapValue(); vd.Message() != nil {
				v := mp.NewValue()
				fillEvery(v.Message(), n, depth+1)
				mp.Set(k, v)
			} else {
				mp.Set(k, fillScalar(vd, n))
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range 2 {
				if fd.Message() != nil {
					v := l.NewElement()
					fillEvery(v.Message(), n, depth+1)
					l.Append(v)
				} else {
					l.Append(fillScalar(fd, n))
				}
			}
		case fd.Message() != nil:
			fillEvery(m.Mutable(fd).Message(), n, depth+1)
		default:
			m.Set(fd, fillScalar(fd, n))
		}
	}
}

// fillScalar is the next non-default value of fd's kind.
func fillScalar(fd protoreflect.FieldDescriptor, n *int) protoreflect.Value {
	*n++
	k := *n
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		for i := vs.Len() - 1; i >= 0; i-- {
			if num := vs.Get(i).Number(); num != 0 {
				return protoreflect.ValueOfEnum(num)
			}
		}
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(k))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(-131*k - 1))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(-int64(k)<<20 - 3)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(70001*k + 200))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(k)<<40 | 0x1234)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(k) + 0.25)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(-float64(k) - 0.5)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("f%d-ü✓", k))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{byte(k), 0xff})
	}
	panic(fmt.Sprintf("fillScalar: field %s of kind %v", fd.FullName(), fd.Kind()))
}

// everyFieldSet is a DecisionRecord with every field of the schema set.
func everyFieldSet() *pb.DecisionRecord {
	d := &pb.DecisionRecord{}
	fillEvery(d.ProtoReflect(), new(int), 0)
	return d
}

// lostFields lists the fields of want (by path, with field numbers) whose
// value got differs or lacks.
func lostFields(want, got protoreflect.Message, path string) []string {
	var lost []string
	fields := want.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		p := fmt.Sprintf("%s.%s (%d)", path, fd.Name(), fd.Number())
		if !want.Has(fd) {
			continue
		}
		if !got.Has(fd) {
			lost = append(lost, p+": missing")
			continue
		}
		switch {
		case fd.IsList() && fd.Message() != nil:
			wl, gl := want.Get(fd).List(), got.Get(fd).List()
			if wl.Len() != gl.Len() {
				lost = append(lost, fmt.Sprintf("%s: %d elements, want %d", p, gl.Len(), wl.Len()))
				continue
			}
			for j := range wl.Len() {
				lost = append(lost, lostFields(wl.Get(j).Message(), gl.Get(j).Message(), fmt.Sprintf("%s[%d]", p, j))...)
			}
		case fd.Message() != nil && !fd.IsMap():
			lost = append(lost, lostFields(want.Get(fd).Message(), got.Get(fd).Message(), p)...)
		case !want.Get(fd).Equal(got.Get(fd)):
			lost = append(lost, fmt.Sprintf("%s: %v, want %v", p, got.Get(fd), want.Get(fd)))
		}
	}
	return lost
}

// TestDecisionWireCoversEverySchemaField: with every field of the schema
// set, the hand-written encoding decodes back to the whole record and is
// byte for byte the generic encoder's; the header encoder agrees with its
// definition (headerOf) too.
func TestDecisionWireCoversEverySchemaField(t *testing.T) {
	d := everyFieldSet()
	want, err := generic.Marshal(d)
	if err != nil {
		t.Fatalf("generic encoder: %v", err)
	}
	got, ok := appendDecision(nil, d, wholeDecision)
	if !ok {
		t.Fatal("the hand-written encoder declined a record with every field set to a valid value")
	}
	back := &pb.DecisionRecord{}
	if err := proto.Unmarshal(got, back); err != nil {
		t.Fatalf("the hand-written encoding does not decode: %v", err)
	}
	if len(back.ProtoReflect().GetUnknown()) > 0 {
		t.Errorf("the hand-written encoding has fields the schema does not know: %x", back.ProtoReflect().GetUnknown())
	}
	for _, f := range lostFields(d.ProtoReflect(), back.ProtoReflect(), "DecisionRecord") {
		t.Errorf("hand-written encoder: %s", f)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("hand-written encoding differs from the generic one\n got %x\nwant %x", got, want)
	}
	for _, keep := range []bool{false, true} {
		h, err := MarshalDecisionHeader(d, keep)
		if err != nil {
			t.Fatalf("keepChains=%v: %v", keep, err)
		}
		if want := headerOf(t, d, keep); !bytes.Equal(h, want) {
			t.Fatalf("keepChains=%v: header differs from its definition\n got %x\nwant %x", keep, h, want)
		}
	}
}

// eachMessage calls fn with m and every message under it, depth first, with
// its path.
func eachMessage(m protoreflect.Message, path string, fn func(m protoreflect.Message, path string)) {
	fn(m, path)
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Message() == nil || fd.IsMap() || !m.Has(fd) {
			continue
		}
		p := path + "." + string(fd.Name())
		if fd.IsList() {
			l := m.Get(fd).List()
			for j := range l.Len() {
				eachMessage(l.Get(j).Message(), fmt.Sprintf("%s[%d]", p, j), fn)
			}
			continue
		}
		eachMessage(m.Get(fd).Message(), p, fn)
	}
}

// mutateEach calls check once per message of a fresh everyFieldSet record
// and per string field of each, after spoil changed that one place.
func mutateEach(t *testing.T, spoil func(m protoreflect.Message, fd protoreflect.FieldDescriptor) bool, check func(d *pb.DecisionRecord, where string)) {
	t.Helper()
	for k := 0; ; k++ {
		d := everyFieldSet()
		i, where := 0, ""
		eachMessage(d.ProtoReflect(), "DecisionRecord", func(m protoreflect.Message, path string) {
			if i > k {
				return
			}
			if i == k && spoil(m, nil) {
				where = path
			}
			i++
			fields := m.Descriptor().Fields()
			for f := range fields.Len() {
				fd := fields.Get(f)
				if i == k && spoil(m, fd) {
					where = fmt.Sprintf("%s.%s", path, fd.Name())
				}
				i++
			}
		})
		if i <= k {
			return
		}
		if where != "" {
			check(d, where)
		}
	}
}

// TestDecisionWireDeclinesWhatItCannotEncode: wherever in the schema a
// message carries unknown fields or a string is not valid UTF-8, the
// hand-written encoder leaves the record to the generic one (which keeps
// the unknown fields and rejects the string); a check it lacks for a new
// field would write bytes proto.Marshal never writes.
func TestDecisionWireDeclinesWhatItCannotEncode(t *testing.T) {
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 1)
	n := 0
	mutateEach(t, func(m protoreflect.Message, fd protoreflect.FieldDescriptor) bool {
		switch {
		case fd == nil:
			m.SetUnknown(unknown)
			return true
		case fd.Kind() != protoreflect.StringKind || fd.IsMap():
			return false
		case fd.IsList():
			m.Get(fd).List().Set(0, protoreflect.ValueOfString("\xff"))
		default:
			m.Set(fd, protoreflect.ValueOfString("\xff"))
		}
		return true
	}, func(d *pb.DecisionRecord, where string) {
		n++
		if _, ok := appendDecision(nil, d, wholeDecision); ok {
			t.Errorf("%s: unknown fields or invalid UTF-8, and the hand-written encoder took the record", where)
		}
	})
	if n < 10 {
		t.Fatalf("only %d places spoiled: the walk does not reach the schema", n)
	}
	t.Logf("%d places spoiled", n)
}
