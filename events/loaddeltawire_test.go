package events

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Wire building blocks: a field of each wire type, and fields together.

func fVarint(num protowire.Number, x uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), x)
}

func fFixed64(num protowire.Number, x uint64) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(nil, num, protowire.Fixed64Type), x)
}

func fBytes(num protowire.Number, parts ...[]byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), slices.Concat(parts...))
}

func fString(num protowire.Number, s string) []byte { return fBytes(num, []byte(s)) }

func packed64(xs ...uint64) []byte {
	var b []byte
	for _, x := range xs {
		b = protowire.AppendFixed64(b, x)
	}
	return b
}

func packedVarints(xs ...uint64) []byte {
	var b []byte
	for _, x := range xs {
		b = protowire.AppendVarint(b, x)
	}
	return b
}

// A decision entry (field 2 of LoadDelta) and a lifecycle entry (field 3)
// of the fields given.
func decisionOf(fields ...[]byte) []byte  { return fBytes(2, fields...) }
func lifecycleOf(fields ...[]byte) []byte { return fBytes(3, fields...) }

func ptr[T any](v T) *T { return &v }

// wireCaseOf is a value and what proto.Unmarshal makes of it, unknown
// fields discarded: want nil when it fails.
type wireCaseOf[M proto.Message] struct {
	name string
	v    []byte
	want M
}

type wireCase = wireCaseOf[*pb.LoadDelta]

// wireCases covers each rule of the wire format the decoder must follow as
// proto.Unmarshal does; TestLoadDeltaWireCases checks each against both.
func wireCases() []wireCase {
	one := func(e *pb.DecisionDelta) *pb.LoadDelta { return &pb.LoadDelta{Decisions: []*pb.DecisionDelta{e}} }
	life := func(e *pb.LifecycleDelta) *pb.LoadDelta { return &pb.LoadDelta{Lifecycle: []*pb.LifecycleDelta{e}} }
	tenFF := slices.Repeat([]byte{0xff}, 9)
	return []wireCase{
		{"empty value", nil, &pb.LoadDelta{}},
		{"packed hashes", decisionOf(fBytes(11, packed64(1, 2, 3))), one(&pb.DecisionDelta{ActiveHashes: []uint64{1, 2, 3}})},
		{"unpacked hashes", decisionOf(fFixed64(11, 1), fFixed64(11, 2), fFixed64(11, 3)), one(&pb.DecisionDelta{ActiveHashes: []uint64{1, 2, 3}})},
		{"packed and unpacked hashes mixed", decisionOf(fFixed64(11, 1), fBytes(11, packed64(2, 3)), fFixed64(11, 4), fBytes(11, packed64(5))),
			one(&pb.DecisionDelta{ActiveHashes: []uint64{1, 2, 3, 4, 5}})},
		{"empty packed hashes", decisionOf(fBytes(11)), one(&pb.DecisionDelta{})},
		{"packed hashes cut mid-element", decisionOf(fBytes(11, packed64(1, 2)[:12])), nil},
		{"packed latency inputs", decisionOf(fBytes(15, packedVarints(1, 300, 1<<20))), one(&pb.DecisionDelta{LatencyInputs: []uint32{1, 300, 1 << 20}})},
		{"unpacked latency inputs", decisionOf(fVarint(15, 1), fVarint(15, 300)), one(&pb.DecisionDelta{LatencyInputs: []uint32{1, 300}})},
		{"latency inputs mixed, past nine", decisionOf(fBytes(15, packedVarints(1, 2, 3, 4, 5, 6, 7, 8)), fVarint(15, 9), fBytes(15, packedVarints(10, 11))),
			one(&pb.DecisionDelta{LatencyInputs: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}})},
		{"latency input past 32 bits keeps its low bits", decisionOf(fBytes(15, packedVarints(1<<32|7)), fVarint(15, 1<<40|5)),
			one(&pb.DecisionDelta{LatencyInputs: []uint32{7, 5}})},
		{"packed latency input cut short", decisionOf(fBytes(15, []byte{0x01, 0x80})), nil},
		{"scalar: the last value wins", decisionOf(fVarint(7, 16), fVarint(8, 5), fVarint(7, 32), fVarint(6, 1), fVarint(6, 0)),
			one(&pb.DecisionDelta{BlockSize: 32, PromptTokens: 5})},
		{"bool: any non-zero varint is true", decisionOf(fVarint(6, 1<<40)), one(&pb.DecisionDelta{Local: true})},
		{"uint32 field keeps the low 32 bits", decisionOf(fVarint(7, 1<<33|16)), one(&pb.DecisionDelta{BlockSize: 16})},
		{"string: the last value wins, empty too", slices.Concat(fString(1, "a"), fString(1, "b"), decisionOf(fString(1, "x"), fString(2, "r"), fString(1, ""))),
			&pb.LoadDelta{WriterId: "b", Decisions: []*pb.DecisionDelta{{RequestId: "r"}}}},
		{"worker ref occurrences merge", decisionOf(fBytes(4, fString(1, "w"), fVarint(2, 1)), fBytes(4, fVarint(2, 3)), fBytes(5, fString(1, "p")), fBytes(5, fString(1, "q"))),
			one(&pb.DecisionDelta{DecodeWorker: &pb.WorkerRef{WorkerId: "w", DpRank: 3}, PrefillWorker: &pb.WorkerRef{WorkerId: "q"}})},
		{"empty worker ref is present", lifecycleOf(fBytes(5)), life(&pb.LifecycleDelta{DecodeWorker: &pb.WorkerRef{}})},
		{"entries do not merge", slices.Concat(decisionOf(fString(1, "a")), lifecycleOf(fString(2, "r")), decisionOf(fString(2, "b"))),
			&pb.LoadDelta{Decisions: []*pb.DecisionDelta{{DecisionId: "a"}, {RequestId: "b"}}, Lifecycle: []*pb.LifecycleDelta{{RequestId: "r"}}}},
		{"wrong wire types are unknown fields", slices.Concat(fVarint(1, 5), fVarint(2, 1), decisionOf(
			fVarint(1, 1), fFixed64(3, 9), fVarint(4, 1), fFixed64(7, 16), fVarint(11, 1), fFixed64(15, 2),
			protowire.AppendFixed32(protowire.AppendTag(nil, 8, protowire.Fixed32Type), 4)), lifecycleOf(fVarint(6, 1), fBytes(7), fFixed64(8, 1), fFixed64(3, 2))),
			&pb.LoadDelta{Decisions: []*pb.DecisionDelta{{}}, Lifecycle: []*pb.LifecycleDelta{{}}}},
		{"unknown field of a known number still well-formed", decisionOf(append(protowire.AppendTag(nil, 1, protowire.Fixed64Type), 1, 2, 3)), nil},
		{"unknown fields of every wire type", slices.Concat(fVarint(99, 1), fFixed64(100, 2), fString(101, "\xff"),
			protowire.AppendFixed32(protowire.AppendTag(nil, 102, protowire.Fixed32Type), 3), decisionOf(fVarint(20, 1), fBytes(4, fVarint(9, 9)))),
			one(&pb.DecisionDelta{DecodeWorker: &pb.WorkerRef{}})},
		{"group as an unknown field", slices.Concat(protowire.AppendTag(nil, 20, protowire.StartGroupType), fVarint(1, 1),
			protowire.AppendTag(nil, 21, protowire.StartGroupType), protowire.AppendTag(nil, 21, protowire.EndGroupType),
			protowire.AppendTag(nil, 20, protowire.EndGroupType), fString(1, "w")), &pb.LoadDelta{WriterId: "w"}},
		{"group of a known field number", decisionOf(protowire.AppendTag(nil, 4, protowire.StartGroupType), fString(1, "w"),
			protowire.AppendTag(nil, 4, protowire.EndGroupType)), one(&pb.DecisionDelta{})},
		{"group ended by another number", slices.Concat(protowire.AppendTag(nil, 20, protowire.StartGroupType), protowire.AppendTag(nil, 21, protowire.EndGroupType)), nil},
		{"group never ended", decisionOf(protowire.AppendTag(nil, 20, protowire.StartGroupType), fVarint(1, 1)), nil},
		{"end group at the top", protowire.AppendTag(nil, 1, protowire.EndGroupType), nil},
		{"end group in an entry", decisionOf(protowire.AppendTag(nil, 2, protowire.EndGroupType)), nil},
		{"wire type 6", protowire.AppendTag(nil, 1, 6), nil},
		{"wire type 7", lifecycleOf(protowire.AppendTag(nil, 1, 7)), nil},
		{"invalid UTF-8 in writer_id", fString(1, "ok\xc3"), nil},
		{"invalid UTF-8 in a worker id", decisionOf(fBytes(5, fString(1, "\xed\xa0\x80"))), nil},
		{"invalid UTF-8 in a lifecycle id", lifecycleOf(fString(1, "\xff")), nil},
		{"truncated varint", decisionOf([]byte{7 << 3, 0x80}), nil},
		{"truncated tag", []byte{0x80}, nil},
		{"ten-byte varint", decisionOf(fVarint(3, math.MaxUint64)), one(&pb.DecisionDelta{DecidedAtUnixNano: -1})},
		{"varint overflowing 64 bits", decisionOf(slices.Concat([]byte{3 << 3}, tenFF, []byte{0x02})), nil},
		{"eleven-byte varint", decisionOf(slices.Concat([]byte{3 << 3}, tenFF, []byte{0x81, 0x00})), nil},
		{"overlong but valid varint and tag", decisionOf([]byte{0x80 | 7<<3, 0x00, 0x90, 0x80, 0x80, 0x00}), one(&pb.DecisionDelta{BlockSize: 16})},
		{"length past the value", append(protowire.AppendVarint([]byte{2<<3 | 2}, 100), 1, 2, 3), nil},
		{"length of 2^62", protowire.AppendVarint([]byte{2<<3 | 2}, 1<<62), nil},
		{"enum values outside the declared ones", slices.Concat(lifecycleOf(fVarint(3, 99)), lifecycleOf(fVarint(3, math.MaxUint64))),
			&pb.LoadDelta{Lifecycle: []*pb.LifecycleDelta{{Kind: 99}, {Kind: -1}}}},
		{"optional fields present at zero", lifecycleOf(fFixed64(6, 0), fVarint(8, 0)), life(&pb.LifecycleDelta{TtftMs: ptr(0.0), OutputTokens: ptr(uint64(0))})},
		{"optional fields: the last value wins", lifecycleOf(fFixed64(7, math.Float64bits(2)), fFixed64(6, math.Float64bits(-1)), fFixed64(7, math.Float64bits(3))),
			life(&pb.LifecycleDelta{TtftMs: ptr(-1.0), ItlMsMean: ptr(3.0)})},
		{"NaN kept", lifecycleOf(fFixed64(6, math.Float64bits(math.NaN()))), life(&pb.LifecycleDelta{TtftMs: ptr(math.NaN())})},
		{"field number 0", []byte{0x00, 0x00}, nil},
		{"field number 0 in an entry", decisionOf([]byte{0x02, 0x00}), nil},
		{"field number 0 in a worker ref", lifecycleOf(fBytes(5, []byte{0x00, 0x00})), nil},
		{"field numbers reserved for implementations", slices.Concat(fVarint(19000, 1), fVarint(19999, 1)), &pb.LoadDelta{}},
		{"largest field number", fVarint(protowire.MaxValidNumber, 1), &pb.LoadDelta{}},
		{"field number past the largest", protowire.AppendVarint(protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3), 1), nil},
		{"field number past int32", protowire.AppendVarint(protowire.AppendVarint(nil, uint64(1)<<35), 1), nil},
		{"entry cut short", decisionOf(fString(1, "abc"))[:4], nil},
	}
}

// discardUnknown drops the unknown fields of m and of every message in it.
func discardUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil || fd.IsMap():
		case fd.IsList():
			for i := range v.List().Len() {
				discardUnknown(v.List().Get(i).Message())
			}
		default:
			discardUnknown(v.Message())
		}
		return true
	})
}

// protoDecodeInto is the generic decoder, into m, unknown fields dropped.
func protoDecodeInto[M proto.Message](v []byte, m M) (M, error) {
	if err := proto.Unmarshal(v, m); err != nil {
		var none M
		return none, err
	}
	discardUnknown(m.ProtoReflect())
	return m, nil
}

func protoDecode(v []byte) (*pb.LoadDelta, error) { return protoDecodeInto(v, &pb.LoadDelta{}) }

func wireDecode(v []byte) (*pb.LoadDelta, error) { return unmarshalLoadDelta(v, math.MaxInt) }

// checkWireCases decodes each case with proto.Unmarshal (protoFn) and
// with a hand-written decoder (hand, named handName): each must decode the
// case's want, or fail where want is nil.
func checkWireCases[M proto.Message](t *testing.T, cases []wireCaseOf[M], protoFn, hand func([]byte) (M, error), handName string) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fails := !c.want.ProtoReflect().IsValid()
			for _, dec := range []struct {
				name string
				fn   func([]byte) (M, error)
			}{{"proto.Unmarshal", protoFn}, {handName, hand}} {
				got, err := dec.fn(c.v)
				switch {
				case fails && err == nil:
					t.Errorf("%s accepted % x as %v", dec.name, c.v, got)
				case !fails && err != nil:
					t.Errorf("%s refused % x: %v", dec.name, c.v, err)
				case !fails && !proto.Equal(got, c.want):
					t.Errorf("%s decoded % x as %v, want %v", dec.name, c.v, got, c.want)
				}
			}
		})
	}
}

// TestLoadDeltaWireCases: each wire rule as proto.Unmarshal applies it
// (the case's want), and the hand-written decoder the same.
func TestLoadDeltaWireCases(t *testing.T) {
	checkWireCases(t, wireCases(), protoDecode, wireDecode, "unmarshalLoadDelta")
}

// wireDelta is a record of the shape peers apply: entries decisions of
// hashes hashes each, every other one remote, with latency inputs.
func wireDelta(entries, hashes int) *pb.LoadDelta {
	d := &pb.LoadDelta{WriterId: "replica-3"}
	w := &pb.WorkerRef{WorkerId: "decode-12"}
	for i := range entries {
		e := &pb.DecisionDelta{
			DecisionId: fmt.Sprintf("0193c1f2-7a4e-7d21-9f0b-%012x", i), RequestId: fmt.Sprintf("req-%08d", i),
			DecidedAtUnixNano: 1_700_000_000_000_000_000 + int64(i), DecodeWorker: w, Local: i%2 == 0,
			BlockSize: 16, PromptTokens: uint32(16*hashes + 5), EffectiveIsl: uint32(8*hashes + 5),
			LatencyPath: uint32(i % 2), LatencyInputs: []uint32{uint32(8*hashes + 5), 0, 3, 12, 40_000, 0, 2048, 700, 1},
		}
		if !e.Local {
			e.PrefillWorker, e.PrefillCachedTokens = &pb.WorkerRef{WorkerId: "prefill-4", DpRank: 1}, uint32(4*hashes)
		}
		for k := range hashes {
			e.ActiveHashes = append(e.ActiveHashes, uint64(i+1)*0x9e3779b97f4a7c15^uint64(k))
		}
		d.Decisions = append(d.Decisions, e)
	}
	return d
}

// wireRecords are valid records of every shape the tests and the fuzz
// target start from.
func wireRecords(t testing.TB) [][]byte {
	var out [][]byte
	add := func(d *pb.LoadDelta) {
		v, err := MarshalLoadDelta(d, "decode-12")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	for _, n := range []int{1, 8} {
		for _, h := range []int{0, 32, 256} {
			add(wireDelta(n, h))
		}
	}
	shared := wireDelta(3, 32)
	shared.Decisions[1].SharesHashesWith, shared.Decisions[1].SharedHashes = 1, 16
	shared.Decisions[2].SharesHashesWith, shared.Decisions[2].SharedHashes = 2, 24
	shared.Decisions[1].ActiveHashes = shared.Decisions[1].ActiveHashes[:16]
	shared.Decisions[2].ActiveHashes = shared.Decisions[2].ActiveHashes[:8]
	shared.Lifecycle = []*pb.LifecycleDelta{
		{DecisionId: "d-0", RequestId: "r-0", Kind: pb.OutcomeEvent_KIND_COMPLETED, EventTimeUnixNano: 1_700_000_000_000_000_100,
			DecodeWorker: &pb.WorkerRef{WorkerId: "decode-12"}, TtftMs: ptr(120.5), ItlMsMean: ptr(11.25), OutputTokens: ptr(uint64(64))},
		{RequestId: "r-9", Kind: pb.OutcomeEvent_KIND_PREFILL_DONE, EventTimeUnixNano: 1_700_000_000_000_000_200, DecodeWorker: &pb.WorkerRef{WorkerId: "decode-12"}},
	}
	add(shared)
	add(&pb.LoadDelta{Lifecycle: shared.Lifecycle})
	return out
}

// TestLoadDeltaWireRecords: valid records decode as proto.Unmarshal
// decodes them, and re-encode to their bytes.
func TestLoadDeltaWireRecords(t *testing.T) {
	for i, v := range wireRecords(t) {
		want, err := protoDecode(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := wireDecode(v)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("record %d: decoded %v, want %v", i, got, want)
		}
		again, err := MarshalLoadDelta(got, "decode-12")
		if err != nil || string(again) != string(v) {
			t.Fatalf("record %d re-encodes differently (%v)", i, err)
		}
	}
}

// TestLoadDeltaWireCopies: the decoded record shares no memory with the
// value (a Kafka client reuses its buffers), and its slices, carved from
// shared allocations, do not run into each other when appended to.
func TestLoadDeltaWireCopies(t *testing.T) {
	v := wireRecords(t)[1] // 1 decision, 32 hashes
	want, _ := protoDecode(v)
	d, err := wireDecode(v)
	if err != nil {
		t.Fatal(err)
	}
	for i := range v {
		v[i] = 0xa5
	}
	if !proto.Equal(d, want) {
		t.Fatalf("the record changed with its value: %v", d)
	}
	v = wireRecords(t)[3] // 8 decisions
	d, _ = wireDecode(v)
	want, _ = protoDecode(v)
	for _, e := range d.Decisions {
		e.LatencyInputs = append(e.LatencyInputs, 1)
		e.ActiveHashes = append(e.ActiveHashes, 1)
		e.DecodeWorker.WorkerId += "x"
	}
	for i, e := range d.Decisions {
		w := want.Decisions[i]
		if !slices.Equal(e.LatencyInputs, append(w.LatencyInputs, 1)) || !slices.Equal(e.ActiveHashes, append(w.ActiveHashes, 1)) ||
			e.DecodeWorker.WorkerId != w.DecodeWorker.WorkerId+"x" || e.DecisionId != w.DecisionId {
			t.Fatalf("decision %d after appends: %v, want %v plus the appends", i, e, w)
		}
	}
}

// TestPutFixed64s: the copy of the bytes, on a little-endian machine, and
// the loop that decodes them anywhere give the same hashes.
func TestPutFixed64s(t *testing.T) {
	val := packed64(0, 1, 0x0102030405060708, math.MaxUint64, 0x9e3779b97f4a7c15)
	want := []uint64{0, 1, 0x0102030405060708, math.MaxUint64, 0x9e3779b97f4a7c15}
	got, portable := make([]uint64, len(want)), make([]uint64, len(want))
	putFixed64s(got, val)
	putFixed64sPortable(portable, val)
	if !slices.Equal(got, want) || !slices.Equal(portable, want) {
		t.Fatalf("putFixed64s %x, putFixed64sPortable %x, want %x", got, portable, want)
	}
	putFixed64s(nil, nil) // nothing to decode
}

// TestDecodeLoadDeltaEntryBound: a value of empty entries up to
// MaxDeltaBytes is refused for its entries before they are allocated.
// The generic decoder allocated each of its half a million entries.
func TestDecodeLoadDeltaEntryBound(t *testing.T) {
	// Lifecycle entries up to the bound, decisions past it: both count.
	checkEntryBound(t, entryBound[*pb.LoadDelta]{
		decode: DecodeLoadDelta, unmarshal: unmarshalLoadDelta, errBound: errDeltaEntries,
		key: "decode-12", fill: []byte{3<<3 | 2, 0}, past: []byte{2<<3 | 2, 0},
		maxEntries: MaxDeltaEntries, maxBytes: MaxDeltaBytes,
		reason: ReasonDeltaTooManyEntries, atBound: ReasonDeltaBadID,
	})
}

// entryBound is a record's bound on its entries, counted before they are
// allocated, for checkEntryBound.
type entryBound[M any] struct {
	decode    func(key, value []byte, logTime time.Time) (M, error)
	unmarshal func(v []byte, maxEntries int) (M, error)
	errBound  error // unmarshal's error past its bound
	key       string
	// fill and past are each an empty entry (its tag and a zero length):
	// fill up to the bound, past beyond it.
	fill, past           []byte
	maxEntries, maxBytes int
	// reason refuses a value past the bound; atBound is what the rules
	// refuse a value of maxEntries empty entries for.
	reason, atBound string
}

// checkEntryBound: a value of maxBytes of empty entries is refused for its
// entries in a few allocations; at the bound the rules decide, and one
// past it, well-formed or not, is refused for its entries.
func checkEntryBound[M any](t *testing.T, b entryBound[M]) {
	t.Helper()
	v := slices.Repeat(b.past, b.maxBytes/len(b.past))
	allocs := testing.AllocsPerRun(3, func() {
		if _, err := b.decode([]byte(b.key), v, time.Time{}); ValidationReason(err) != b.reason {
			t.Fatalf("got %v, want reason %s", err, b.reason)
		}
	})
	if allocs > 8 {
		t.Fatalf("%v allocations to refuse the value", allocs)
	}
	entries := slices.Repeat(b.fill, b.maxEntries)
	for _, c := range []struct {
		name   string
		v      []byte
		reason string
	}{
		{"at the bound", entries, b.atBound},
		{"one past the bound", slices.Concat(entries, b.past), b.reason},
		{"malformed, past the bound", slices.Concat(entries, b.past[:1], []byte{1, 0}), b.reason},
	} {
		if _, err := b.decode([]byte(b.key), c.v, time.Time{}); ValidationReason(err) != c.reason {
			t.Fatalf("%s: %v, want reason %s", c.name, err, c.reason)
		}
	}
	if _, err := b.unmarshal(entries, b.maxEntries-1); !errors.Is(err, b.errBound) {
		t.Fatalf("past the caller's bound: %v", err)
	}
}

// FuzzLoadDeltaWireMatchesProto: for any value, unmarshalLoadDelta fails
// exactly when proto.Unmarshal fails, and otherwise decodes the message
// proto.Unmarshal decodes, without its unknown fields. Bounded to two
// entries, it refuses a value proto.Unmarshal accepts exactly when the
// value has more, and decodes the same message otherwise.
func FuzzLoadDeltaWireMatchesProto(f *testing.F) {
	for _, v := range wireRecords(f) {
		f.Add(v)
		f.Add(v[:len(v)/2])
		f.Add(v[:len(v)-1])
		f.Add(v[1:])
	}
	for _, c := range wireCases() {
		f.Add(c.v)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		checkMatchesProto(t, v, protoDecode, unmarshalLoadDelta, errDeltaEntries,
			func(d *pb.LoadDelta) int { return len(d.Decisions) + len(d.Lifecycle) })
	})
}

// checkMatchesProto is the body of a fuzz target that compares a
// hand-written decoder, hand(v, bound), with proto.Unmarshal (protoFn):
// unbounded, it fails exactly when proto.Unmarshal fails and otherwise
// decodes the same message; bounded to two entries (entries counts them),
// it refuses with errBound a value proto.Unmarshal accepts exactly when
// the value has more, and decodes the same message otherwise.
func checkMatchesProto[M proto.Message](t *testing.T, v []byte, protoFn func([]byte) (M, error),
	hand func([]byte, int) (M, error), errBound error, entries func(M) int) {
	want, werr := protoFn(v)
	got, err := hand(v, math.MaxInt)
	if (err != nil) != (werr != nil) {
		t.Fatalf("% x: hand-written decoder: %v; proto.Unmarshal: %v", v, err, werr)
	}
	if err == nil && !proto.Equal(got, want) {
		t.Fatalf("% x: decoded %v, proto.Unmarshal %v", v, got, want)
	}
	bounded, berr := hand(v, 2)
	switch {
	case werr != nil:
		if berr == nil {
			t.Fatalf("% x: bounded, accepted what proto.Unmarshal refuses (%v)", v, werr)
		}
	case entries(want) > 2:
		if !errors.Is(berr, errBound) {
			t.Fatalf("% x: bounded, %d entries: %v", v, entries(want), berr)
		}
	case berr != nil || !proto.Equal(bounded, want):
		t.Fatalf("% x: bounded, decoded %v (%v), proto.Unmarshal %v", v, bounded, berr, want)
	}
}

// BenchmarkDecodeLoadDelta: decoding a record peers apply (validation
// left out), by the generic decoder (dec=proto) and the hand-written one
// (dec=wire), by entries and hashes per entry.
func BenchmarkDecodeLoadDelta(b *testing.B) {
	for _, n := range []int{1, 8} {
		for _, h := range []int{0, 32, 256} {
			v, err := MarshalLoadDelta(wireDelta(n, h), "decode-12")
			if err != nil {
				b.Fatal(err)
			}
			name := fmt.Sprintf("entries=%d/hashes=%d/dec=", n, h)
			benchDecode(b, name+"proto", v, func(v []byte) error { return proto.Unmarshal(v, &pb.LoadDelta{}) })
			benchDecode(b, name+"wire", v, func(v []byte) error { _, err := unmarshalLoadDelta(v, MaxDeltaEntries); return err })
		}
	}
}

// benchDecode runs fn on v as the sub-benchmark name, reporting bytes,
// allocations and CPU time per op.
func benchDecode(b *testing.B, name string, v []byte, fn func([]byte) error) {
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(v)))
		cpu0 := processCPU()
		for b.Loop() {
			if err := fn(v); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu0)
	})
}

// processCPU is the process's CPU time in nanoseconds, the garbage
// collector's included: a machine shared with other work inflates it less
// than the wall time.
func processCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// reportCPU reports the process CPU time per op since cpu0 (processCPU)
// as cpu-ns/op.
func reportCPU(b *testing.B, cpu0 int64) {
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}
