package events

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
)

// forApplyOf is the definition UnmarshalDecisionForApply must meet, written
// over a whole decoded record: the apply fields, the decode worker's decode
// rows and the prefill worker's prefill rows, and the chains the apply
// rules read.
func forApplyOf(full *pb.DecisionRecord, keepChains bool) *pb.DecisionRecord {
	w := &pb.DecisionRecord{}
	src, dst := full.ProtoReflect(), w.ProtoReflect()
	for _, name := range ApplyFields {
		fd := src.Descriptor().Fields().ByName(name)
		if src.Has(fd) {
			dst.Set(fd, src.Get(fd))
		}
	}
	dw, pw := full.GetDecodeWorker(), full.GetPrefillWorker()
	bs := uint32(0)
	for _, c := range full.GetCandidates() {
		cw := c.GetWorker()
		isDecode := c.GetPool() == pb.Pool_POOL_DECODE && cw.GetWorkerId() == dw.GetWorkerId() && cw.GetDpRank() == dw.GetDpRank()
		isPrefill := pw != nil && c.GetPool() == pb.Pool_POOL_PREFILL && cw.GetWorkerId() == pw.GetWorkerId() && cw.GetDpRank() == pw.GetDpRank()
		if isDecode && bs == 0 {
			bs = c.GetBlockSize()
		}
		if isDecode || isPrefill {
			w.Candidates = append(w.Candidates, c)
		}
	}
	for _, c := range full.GetChains() {
		if keepChains {
			w.Chains = append(w.Chains, c)
		} else if bs == 0 || c.GetBlockSize() == bs {
			w.Chains = append(w.Chains, c)
			break
		}
	}
	return w
}

// checkForApply compares UnmarshalDecisionForApply with proto.Unmarshal,
// forApplyOf and the header definition on one value. Whatever
// proto.Unmarshal accepts, it accepts, with the same apply fields and the
// value less its bulk as header; on a canonical value (the deterministic
// encoding of a record, as pdrouter writes them) it gives forApplyOf's
// record and MarshalDecisionHeader's header. It may accept a value whose
// unread rows are malformed, never panic on one.
func checkForApply(t *testing.T, v []byte) {
	t.Helper()
	full := &pb.DecisionRecord{}
	errFull := proto.Unmarshal(v, full)
	canonical := false
	if errFull == nil {
		again, err := marshal.Marshal(full)
		canonical = err == nil && string(again) == string(v)
	}
	for _, keep := range []bool{false, true} {
		got, header, err := UnmarshalDecisionForApply(v, keep)
		if errFull != nil {
			continue // refused or not: no panic is the property
		}
		if err != nil {
			t.Fatalf("keepChains %v: UnmarshalDecisionForApply refused what proto.Unmarshal accepts: %v, on %x", keep, err, v)
		}
		want := forApplyOf(full, keep)
		if canonical && !proto.Equal(got, want) {
			t.Fatalf("keepChains %v: the partial record differs from the definition's on %x", keep, v)
		}
		gotFields, wantFields := proto.Clone(got).(*pb.DecisionRecord), proto.Clone(want).(*pb.DecisionRecord)
		gotFields.Candidates, gotFields.Chains, wantFields.Candidates, wantFields.Chains = nil, nil, nil, nil
		if !proto.Equal(gotFields, wantFields) {
			t.Fatalf("keepChains %v: the apply fields differ from proto.Unmarshal's on %x", keep, v)
		}
		parts := decisionParts(0)
		if keep {
			parts = partChains
		}
		stripped, err := appendStrippedDecision(nil, v, parts)
		if err != nil || string(header) != string(stripped) {
			t.Fatalf("keepChains %v: header %x, want the value without its bulk %x (%v)", keep, header, stripped, err)
		}
		if canonical {
			h, err := MarshalDecisionHeader(full, keep)
			if err != nil || string(h) != string(header) {
				t.Fatalf("keepChains %v: header %x, MarshalDecisionHeader %x (%v)", keep, header, h, err)
			}
		}
	}
}

// TestUnmarshalDecisionForApply: on the samples and random records (any
// worker matching, several block sizes, rows of both pools), the partial
// decode is the definition's.
func TestUnmarshalDecisionForApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 13))
	records := decisionCorpus(rng, 3000)
	// A fleet-sized record whose prefill worker is in the table, with a
	// second chain at another block size ahead of the decode worker's.
	big := eventstest.Decision(128, 32, 1000)
	big.Mode, big.PrefillWorker = "remote", &pb.WorkerRef{WorkerId: big.GetCandidates()[140].GetWorker().GetWorkerId()}
	big.DecodeWorker = big.GetCandidates()[77].GetWorker()
	big.Chains = append([]*pb.HashChain{{BlockSize: 32, BlockHashes: []uint64{1, 2, 3}}}, big.Chains...)
	records = append(records, big)
	for _, d := range records {
		v, err := marshal.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		checkForApply(t, v)
	}
	got, _, err := UnmarshalDecisionForApply(mustMarshal(t, big), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.GetCandidates()) != 2 || len(got.GetChains()) != 1 || got.GetChains()[0].GetBlockSize() != 16 {
		t.Fatalf("kept %d rows and %d chains (block size %d): want 2 rows and the block-size-16 chain",
			len(got.GetCandidates()), len(got.GetChains()), got.GetChains()[0].GetBlockSize())
	}
}

func mustMarshal(t testing.TB, d *pb.DecisionRecord) []byte {
	v, err := marshal.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestUnmarshalDecisionForApplyMalformed: what the partial decoder reads
// is checked as proto.Unmarshal checks it, so a record malformed there is
// refused: the header (invalid UTF-8 in config_json, a field it does not
// even decode), the framing of a row's first fields, a row it reads, the
// chain it reads. A malformed row it does not read (invalid UTF-8 in
// another worker's row, or in a worker id, which then matches no worker
// of the decision) is not looked at: the record is applied as if the row
// were not there.
func TestUnmarshalDecisionForApplyMalformed(t *testing.T) {
	d := eventstest.Decision(4, 2, 0)
	d.DecodeWorker = d.GetCandidates()[1].GetWorker()
	base := mustMarshal(t, d)
	field := func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
	}
	badUTF8 := []byte{0xff, 0xfe}
	decodeRef := field(1, []byte(d.GetDecodeWorker().GetWorkerId()))
	poolDecode := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), uint64(pb.Pool_POOL_DECODE))
	refused := map[string][]byte{
		"header":      field(17, badUTF8),
		"row framing": field(decisionCandidatesField, append(protowire.AppendTag(nil, 1, protowire.BytesType), 5, 0x0a)),
		"read row":    field(decisionCandidatesField, append(append(field(1, decodeRef), poolDecode...), field(4, badUTF8)...)),
		"read chain":  field(decisionChainsField, append(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 16), field(2, make([]byte, 12))...)),
	}
	for name, tail := range refused {
		v := append(append([]byte{}, base...), tail...)
		if err := proto.Unmarshal(v, &pb.DecisionRecord{}); err == nil {
			t.Fatalf("%s: the case is not malformed for proto.Unmarshal", name)
		}
		if _, _, err := UnmarshalDecisionForApply(v, false); err == nil {
			t.Errorf("%s: accepted", name)
		}
		checkForApply(t, v)
	}
	want, wantHeader, wantErr := UnmarshalDecisionForApply(base, false)
	for name, unread := range map[string][]byte{
		"another worker's row": field(decisionCandidatesField, append(append(field(1, field(1, []byte("prefill-z9"))), poolDecode...), field(4, badUTF8)...)),
		"worker id":            field(decisionCandidatesField, field(1, field(1, badUTF8))),
	} {
		v := append(append([]byte{}, base...), unread...)
		got, header, err := UnmarshalDecisionForApply(v, false)
		if err != nil || wantErr != nil || !proto.Equal(got, want) || string(header) != string(wantHeader) {
			t.Fatalf("%s: %v, want the record without it (%v)", name, err, wantErr)
		}
	}
	// A row of the wrong wire type is an unknown field to both.
	checkForApply(t, append(append([]byte{}, base...), protowire.AppendVarint(protowire.AppendTag(nil, decisionCandidatesField, protowire.VarintType), 3)...))
}

// TestDecodeForApply: the envelope checks are Decode's, and a decision is
// Partial.
func TestDecodeForApply(t *testing.T) {
	d := eventstest.Decision(128, 32, 100)
	d.DecodeWorker = d.GetCandidates()[5].GetWorker()
	r, err := NewRecord(Names{}, []byte("decode-1"), d)
	if err != nil {
		t.Fatal(err)
	}
	env, err := DecodeForApply(Names{}, r, false)
	if err != nil || !env.Partial || len(env.Message.(*pb.DecisionRecord).GetCandidates()) != 1 || len(env.Header) == 0 {
		t.Fatalf("env %+v err %v", env, err)
	}
	r.Headers = nil
	if _, err := DecodeForApply(Names{}, r, false); err == nil {
		t.Fatal("a record without its schema header was accepted")
	}
	o, err := NewRecord(Names{}, []byte("decode-1"), &pb.OutcomeEvent{RequestId: "r", Kind: pb.OutcomeEvent_KIND_COMPLETED, EventTimeUnixNano: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	if env, err := DecodeForApply(Names{}, o, false); err != nil || env.Partial {
		t.Fatalf("outcome: env %+v err %v", env, err)
	}
}

// TestForApplyRefusesFieldNumbersPastTheLimit: a record with a top-level
// field numbered past protowire.MaxValidNumber is refused, as
// proto.Unmarshal refuses it (protowire's tag reader lets it through).
func TestForApplyRefusesFieldNumbersPastTheLimit(t *testing.T) {
	v, err := marshal.Marshal(decisionCorpus(rand.New(rand.NewPCG(3, 5)), 1)[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, num := range []uint64{uint64(protowire.MaxValidNumber) + 1, 1<<32 - 1} {
		bad := protowire.AppendVarint(protowire.AppendVarint(slices.Clone(v), num<<3), 1)
		if err := proto.Unmarshal(bad, &pb.DecisionRecord{}); err == nil {
			t.Fatalf("field %d: proto.Unmarshal accepts it", num)
		}
		for _, keep := range []bool{false, true} {
			if _, _, err := UnmarshalDecisionForApply(bad, keep); err == nil {
				t.Errorf("field %d, keepChains %v: accepted", num, keep)
			}
		}
	}
}

// FuzzUnmarshalDecisionForApply: on any value, the partial decoder accepts
// exactly what proto.Unmarshal accepts, and gives the definition's record.
func FuzzUnmarshalDecisionForApply(f *testing.F) {
	rng := rand.New(rand.NewPCG(17, 19))
	for _, d := range decisionCorpus(rng, 30) {
		v, err := marshal.Marshal(d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(v)
	}
	f.Add([]byte{0x9a, 0x01, 0x03, 0x0a, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, v []byte) {
		checkForApply(t, v)
	})
}

// BenchmarkDecodeDecision: a fleet-sized record (128 decode + 32 prefill
// rows, a 1,000-block chain) decoded whole and for apply.
func BenchmarkDecodeDecision(b *testing.B) {
	r, err := NewRecord(Names{}, []byte("decode-1"), eventstest.Decision(128, 32, 1000))
	if err != nil {
		b.Fatal(err)
	}
	r.Topic = Names{}.Physical(TopicDecisions)
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Decode(Names{}, r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("apply", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := processCPU()
		for b.Loop() {
			if _, err := DecodeForApply(Names{}, r, false); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu0)
	})
}

// TestChainUnknownFieldsKept: a chain field of a later schema, or a known
// number with another wire type, stays in the chain read for apply as an
// unknown field, as proto.Unmarshal keeps it (the fuzzer found the partial
// decoder dropping it).
func TestChainUnknownFieldsKept(t *testing.T) {
	chain := protowire.AppendTag(nil, 1, protowire.VarintType)
	chain = protowire.AppendVarint(chain, 16)
	chain = protowire.AppendTag(chain, 2, protowire.Fixed64Type)
	chain = protowire.AppendFixed64(chain, 42)
	later := protowire.AppendTag(nil, 15, protowire.VarintType)
	later = protowire.AppendVarint(later, 13)
	later = protowire.AppendTag(later, 3, protowire.BytesType) // omitted_blocks, but not a varint
	later = protowire.AppendBytes(later, []byte("x"))
	chain = append(chain, later...)
	d := &pb.DecisionRecord{DecisionId: "d", RequestId: "r", DecodeWorker: &pb.WorkerRef{WorkerId: "w"}}
	v, err := marshal.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	v = protowire.AppendBytes(protowire.AppendTag(v, decisionChainsField, protowire.BytesType), chain)
	checkForApply(t, v)
	got, _, err := UnmarshalDecisionForApply(v, true)
	if err != nil || len(got.GetChains()) != 1 {
		t.Fatalf("%v, %v", got, err)
	}
	c := got.GetChains()[0]
	if c.GetBlockSize() != 16 || len(c.GetBlockHashes()) != 1 || string(c.ProtoReflect().GetUnknown()) != string(later) {
		t.Fatalf("chain %v, unknown %x, want %x", c, c.ProtoReflect().GetUnknown(), later)
	}
}
