package events

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// shareOf is a share (field 4 of LoadShares) of the fields given.
func shareOf(fields ...[]byte) []byte { return fBytes(4, fields...) }

// sampleOf is a LatencySample field of a LoadShares value, of fields.
func sampleOf(fields ...[]byte) []byte { return fBytes(5, fields...) }

// sharesWireCases covers the wire rules the decoder must follow as
// proto.Unmarshal does, for LoadShares' own fields (want nil: it fails);
// wireCases covers the reader they share.
func sharesWireCases() []wireCaseOf[*pb.LoadShares] {
	one := func(e *pb.WorkerShare) *pb.LoadShares { return &pb.LoadShares{Shares: []*pb.WorkerShare{e}} }
	return []wireCaseOf[*pb.LoadShares]{
		{"empty value", nil, &pb.LoadShares{}},
		{"top-level scalars: the last value wins", slices.Concat(fVarint(2, 7), fString(1, "a"), fVarint(3, 5), fVarint(2, 9), fString(1, "b")),
			&pb.LoadShares{WriterId: "b", Seq: 9, ClockUnixNano: 5}},
		{"negative clock as a ten-byte varint", fVarint(3, math.MaxUint64), &pb.LoadShares{ClockUnixNano: -1}},
		{"every share field", shareOf(fBytes(1, fString(1, "w"), fVarint(2, 3)), fVarint(2, 1<<40), fVarint(3, 9), fVarint(4, 77),
			fVarint(5, 2), fVarint(6, 1<<41)),
			one(&pb.WorkerShare{Worker: &pb.WorkerRef{WorkerId: "w", DpRank: 3}, DecodeBlocks: 1 << 40, Requests: 9, PrefillTokens: 77,
				RecentDecisions: 2, RecentLocalTokens: 1 << 41})},
		{"uint32 fields keep the low 32 bits", shareOf(fVarint(3, 1<<32|4), fVarint(5, 1<<33|5)), one(&pb.WorkerShare{Requests: 4, RecentDecisions: 5})},
		{"worker occurrences merge", shareOf(fBytes(1, fString(1, "w"), fVarint(2, 1)), fBytes(1, fVarint(2, 3))),
			one(&pb.WorkerShare{Worker: &pb.WorkerRef{WorkerId: "w", DpRank: 3}})},
		{"empty worker is present", shareOf(fBytes(1)), one(&pb.WorkerShare{Worker: &pb.WorkerRef{}})},
		{"shares do not merge", slices.Concat(shareOf(fVarint(3, 1)), fString(1, "x"), shareOf(fVarint(3, 2))),
			&pb.LoadShares{WriterId: "x", Shares: []*pb.WorkerShare{{Requests: 1}, {Requests: 2}}}},
		{"wrong wire types are unknown fields", slices.Concat(fVarint(1, 1), fFixed64(2, 3), fString(3, "x"), fVarint(4, 1),
			shareOf(fVarint(1, 1), fFixed64(2, 1), fString(7, "y"))),
			&pb.LoadShares{Shares: []*pb.WorkerShare{{}}}},
		{"unknown fields", slices.Concat(fVarint(99, 1), fString(100, "\xff"), shareOf(fVarint(20, 1), fBytes(1, fVarint(9, 9)))),
			one(&pb.WorkerShare{Worker: &pb.WorkerRef{}})},
		{"every sample field", sampleOf(fString(1, "d1"), fVarint(2, 11), fVarint(3, 1), fBytes(4, []byte{0, 5, 0x80, 0x80, 0x40}),
			fVarint(4, 9), fVarint(5, 1825), fVarint(6, 12), fVarint(7, 231), fVarint(8, 13)),
			&pb.LoadShares{Samples: []*pb.LatencySample{{DecisionId: "d1", DecidedAtUnixNano: 11, LatencyPath: 1,
				LatencyInputs: []uint32{0, 5, 1 << 20, 9}, TtftUnits: proto.Uint32(1825), TtftAtUnixNano: 12, ItlUnits: proto.Uint32(231), ItlAtUnixNano: 13}}}},
		{"a zero target is present", sampleOf(fVarint(7, 0)), &pb.LoadShares{Samples: []*pb.LatencySample{{ItlUnits: proto.Uint32(0)}}}},
		{"sample targets keep the low 32 bits", sampleOf(fVarint(5, 1<<32|7)), &pb.LoadShares{Samples: []*pb.LatencySample{{TtftUnits: proto.Uint32(7)}}}},
		{"samples do not merge, and sit beside shares", slices.Concat(sampleOf(fVarint(3, 1)), shareOf(fVarint(3, 4)), sampleOf(fString(1, "x"))),
			&pb.LoadShares{Shares: []*pb.WorkerShare{{Requests: 4}}, Samples: []*pb.LatencySample{{LatencyPath: 1}, {DecisionId: "x"}}}},
		{"invalid UTF-8 in a sample's decision id", sampleOf(fString(1, "\xff")), nil},
		{"truncated packed inputs", sampleOf(fBytes(4, []byte{0x80})), nil},
		{"invalid UTF-8 in writer_id", fString(1, "ok\xc3"), nil},
		{"invalid UTF-8 in a worker id", shareOf(fBytes(1, fString(1, "\xed\xa0\x80"))), nil},
		{"truncated varint in a share", shareOf([]byte{3 << 3, 0x80}), nil},
		{"end group in a share", shareOf(protowire.AppendTag(nil, 2, protowire.EndGroupType)), nil},
		{"field number 0 in a worker", shareOf(fBytes(1, []byte{0x00, 0x00})), nil},
		{"share cut short", shareOf(fVarint(2, 5))[:3], nil},
		{"length past the value", append(protowire.AppendVarint([]byte{4<<3 | 2}, 100), 1, 2, 3), nil},
	}
}

func sharesProtoDecode(v []byte) (*pb.LoadShares, error) { return protoDecodeInto(v, &pb.LoadShares{}) }

func sharesWireDecode(v []byte) (*pb.LoadShares, error) { return unmarshalLoadShares(v, math.MaxInt) }

// TestLoadSharesWireCases: each case as proto.Unmarshal decodes it (the
// case's want), and the hand-written decoder the same.
func TestLoadSharesWireCases(t *testing.T) {
	checkWireCases(t, sharesWireCases(), sharesProtoDecode, sharesWireDecode, "unmarshalLoadShares")
}

// wireShares is a valid snapshot of n shares, of the shape peers apply.
func wireShares(n int) *pb.LoadShares {
	s := &pb.LoadShares{WriterId: "replica-3", Seq: 1_234_567, ClockUnixNano: 1_700_000_000_123_456_789}
	for i := range n {
		s.Shares = append(s.Shares, &pb.WorkerShare{
			Worker:       &pb.WorkerRef{WorkerId: fmt.Sprintf("decode-%03d", i/2), DpRank: uint32(i % 2)},
			DecodeBlocks: uint64(300 + 17*i), Requests: uint32(3 + i%5), PrefillTokens: uint64(2048 * (i % 3)),
			RecentDecisions: 2, RecentLocalTokens: uint64(700 * (i % 2)),
		})
	}
	return s
}

// TestLoadSharesWireRecords: valid records decode as proto.Unmarshal
// decodes them and re-encode to their bytes, and the decoded record
// shares no memory with the value (a Kafka client reuses its buffers).
func TestLoadSharesWireRecords(t *testing.T) {
	for _, n := range []int{1, 3, 160} {
		v, err := MarshalLoadShares(wireShares(n), "replica-3")
		if err != nil {
			t.Fatal(err)
		}
		want, err := sharesProtoDecode(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := sharesWireDecode(v)
		if err != nil || !proto.Equal(got, want) {
			t.Fatalf("%d shares: decoded %v (%v), want %v", n, got, err, want)
		}
		again, err := MarshalLoadShares(got, "replica-3")
		if err != nil || string(again) != string(v) {
			t.Fatalf("%d shares re-encode differently (%v)", n, err)
		}
		for i := range v {
			v[i] = 0xa5
		}
		if !proto.Equal(got, want) {
			t.Fatalf("%d shares: the record changed with its value: %v", n, got)
		}
	}
}

// TestDecodeLoadSharesWorkerBound: a value of empty shares up to
// MaxSharesBytes (half a million) is refused for its shares before they
// are allocated, where proto.Unmarshal allocates each.
func TestDecodeLoadSharesWorkerBound(t *testing.T) {
	empty := []byte{4<<3 | 2, 0}
	checkEntryBound(t, entryBound[*pb.LoadShares]{
		decode: DecodeLoadShares, unmarshal: unmarshalLoadShares, errBound: errShareWorkers,
		key: "replica-3", fill: empty, past: empty,
		maxEntries: MaxShareWorkers, maxBytes: MaxSharesBytes,
		reason: ReasonSharesTooManyWorkers, atBound: ReasonSharesBadWriter,
	})
	v := slices.Repeat(empty, MaxSharesBytes/len(empty))
	if generic := testing.AllocsPerRun(1, func() { _, _ = sharesProtoDecode(v) }); generic < MaxSharesBytes/2 {
		t.Fatalf("proto.Unmarshal made %v allocations, fewer than the shares", generic)
	}
}

// FuzzLoadSharesWireMatchesProto: for any value, unmarshalLoadShares fails
// exactly when proto.Unmarshal fails, and otherwise decodes the message
// proto.Unmarshal decodes, without its unknown fields. Bounded to two
// shares, it refuses a value proto.Unmarshal accepts exactly when the
// value has more.
func FuzzLoadSharesWireMatchesProto(f *testing.F) {
	for _, n := range []int{1, 3} {
		v, err := MarshalLoadShares(wireShares(n), "replica-3")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(v)
		f.Add(v[:len(v)/2])
		f.Add(v[1:])
	}
	for _, c := range sharesWireCases() {
		f.Add(c.v)
	}
	withSamples := wireShares(2)
	for i := range 3 {
		ttft := uint32(100 * i)
		withSamples.Samples = append(withSamples.Samples, &pb.LatencySample{DecisionId: fmt.Sprintf("d%d", i), DecidedAtUnixNano: 1_700_000_000_000_000_000,
			LatencyPath: uint32(i % 2), LatencyInputs: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}, TtftUnits: &ttft, TtftAtUnixNano: 1_700_000_000_100_000_000})
	}
	v, err := MarshalLoadShares(withSamples, "replica-3")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v)
	f.Fuzz(func(t *testing.T, v []byte) {
		// Past MaxShareSamples the hand-written decoder refuses what
		// proto.Unmarshal takes: that bound is checked here, the rest by
		// checkMatchesProto.
		if want, err := sharesProtoDecode(v); err == nil && len(want.Samples) > MaxShareSamples {
			if _, err := unmarshalLoadShares(v, math.MaxInt); err != errTooManySamples {
				t.Fatalf("%d samples: %v", len(want.Samples), err)
			}
			return
		}
		checkMatchesProto(t, v, sharesProtoDecode, unmarshalLoadShares, errShareWorkers,
			func(s *pb.LoadShares) int { return len(s.Shares) })
	})
}

// BenchmarkDecodeLoadShares: decoding a snapshot (validation left out) by
// the generic decoder (dec=proto) and the hand-written one (dec=wire).
func BenchmarkDecodeLoadShares(b *testing.B) {
	for _, n := range []int{3, 160} {
		v, err := MarshalLoadShares(wireShares(n), "replica-3")
		if err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("shares=%d/dec=", n)
		benchDecode(b, name+"proto", v, func(v []byte) error { return proto.Unmarshal(v, &pb.LoadShares{}) })
		benchDecode(b, name+"wire", v, func(v []byte) error { _, err := unmarshalLoadShares(v, MaxShareWorkers); return err })
	}
}
