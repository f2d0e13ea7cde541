package events

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
)

// headerOf is the definition MarshalDecisionHeader must meet: the generic
// encoding of a copy of d without its table and, unless keepChains, chains.
func headerOf(t *testing.T, d *pb.DecisionRecord, keepChains bool) []byte {
	t.Helper()
	// A decoded copy, not proto.Clone: Clone turns a -0 double into +0,
	// which the encoders rightly write differently.
	whole, err := generic.Marshal(d)
	if err != nil {
		t.Fatalf("generic encoder: %v", err)
	}
	c := &pb.DecisionRecord{}
	if err := proto.Unmarshal(whole, c); err != nil {
		t.Fatal(err)
	}
	c.Candidates = nil
	if !keepChains {
		c.Chains = nil
	}
	b, err := generic.Marshal(c)
	if err != nil {
		t.Fatalf("generic encoder: %v", err)
	}
	return b
}

// TestDecisionHeaderIsTheRecordWithoutItsBulk: on random records, on the
// samples and on records only the generic encoder takes (unknown fields at
// the top level and in a row, a nil row), the header is exactly the
// encoding of the record with the table (and chains) cleared, and it
// decodes to that record.
func TestDecisionHeaderIsTheRecordWithoutItsBulk(t *testing.T) {
	records := decisionCorpus(rand.New(rand.NewPCG(7, 11)), 2000)
	unknownTop := eventstest.Decision(4, 2, 10)
	unknownTop.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7))
	unknownRow := eventstest.Decision(4, 2, 10)
	unknownRow.Candidates[1].ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7))
	records = append(records, unknownTop, unknownRow)
	for i, d := range records {
		for _, keep := range []bool{false, true} {
			got, err := MarshalDecisionHeader(d, keep)
			if err != nil {
				t.Fatalf("record %d keepChains=%v: %v", i, keep, err)
			}
			want := headerOf(t, d, keep)
			if !bytes.Equal(got, want) {
				t.Fatalf("record %d keepChains=%v: header differs\n got %x\nwant %x", i, keep, got, want)
			}
			framed, err := AppendDecisionHeader([]byte("prefix"), d, keep)
			if err != nil || !bytes.Equal(framed, append([]byte("prefix"), want...)) {
				t.Fatalf("record %d keepChains=%v: AppendDecisionHeader after a prefix: %x, %v", i, keep, framed, err)
			}
			back := &pb.DecisionRecord{}
			if err := proto.Unmarshal(got, back); err != nil {
				t.Fatalf("record %d: the header does not decode: %v", i, err)
			}
			if len(back.GetCandidates()) != 0 || (!keep && len(back.GetChains()) != 0) || (keep && len(back.GetChains()) != len(d.GetChains())) {
				t.Fatalf("record %d keepChains=%v: header kept %d rows and %d chains", i, keep, len(back.GetCandidates()), len(back.GetChains()))
			}
			if back.GetDecisionId() != d.GetDecisionId() || back.GetMode() != d.GetMode() || !proto.Equal(back.GetWatermark(), d.GetWatermark()) {
				t.Fatalf("record %d: the header lost a header field", i)
			}
		}
	}
	bad := eventstest.Decision(4, 2, 0)
	bad.Reason = "\xff"
	if _, err := MarshalDecisionHeader(bad, false); err == nil {
		t.Fatal("invalid UTF-8 in the header was encoded; the generic encoder rejects it")
	}
}

// TestStripDecisionFieldsRejectsTruncation: a cut record is an error,
// never a silently shorter header.
func TestAppendStrippedDecisionRejectsTruncation(t *testing.T) {
	v, err := Marshal(eventstest.Decision(4, 2, 10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendStrippedDecision(nil, v[:len(v)-3], 0); err == nil {
		t.Fatal("a truncated record was stripped without an error")
	}
}
