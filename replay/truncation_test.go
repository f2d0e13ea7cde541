package replay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/replay"
)

// truncate cuts rec as a writer with a small budget does: its chain to the
// first keep blocks, and its table without the unpicked row of drop.
func truncate(t *testing.T, rec *pb.DecisionRecord, keep int, drop string) *pb.DecisionRecord {
	t.Helper()
	out := proto.Clone(rec).(*pb.DecisionRecord)
	if len(out.Chains) != 1 || len(out.Chains[0].BlockHashes) <= keep {
		t.Fatalf("want one chain of more than %d blocks: %v", keep, out.Chains)
	}
	c := out.Chains[0]
	c.OmittedBlocks = uint32(len(c.BlockHashes) - keep)
	c.BlockHashes = c.BlockHashes[:keep]
	var rows []*pb.Candidate
	for _, r := range out.Candidates {
		if r.GetWorker().GetWorkerId() == drop {
			if r.GetPicked() {
				t.Fatalf("%s is picked", drop)
			}
			out.OmittedCandidates = &pb.OmittedCandidates{Decode: 1, Eligible: 1}
			continue
		}
		rows = append(rows, r)
	}
	out.Candidates = rows
	return out
}

// TestExplainTruncatedRecord: a record whose chain keeps 20 of its 70
// blocks (its decode worker matched 64) and whose table left a row out is
// explained honestly: the pure check reproduces it from the rows it kept,
// the state check recomputes overlaps over the kept prefix only and
// compares them with the recorded ones capped at 20, and the explanation
// says so.
func TestExplainTruncatedRecord(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	r := fleetReplica(t, brokers, prefix, nil)
	a := r.route("long", promptOf(0, 64*16, 100, 1))
	r.catchUp()
	whole := byID(readDecisions(t, brokers, r.names, 1))[a.DecisionID]
	if a.Decode != "decode-1" {
		t.Fatalf("routed to %s, want decode-1 (which holds 64 blocks of the prompt)", a.Decode)
	}
	rec := truncate(t, whole, 20, "decode-3")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	checker := &replay.KafkaStateChecker{Client: r.conn, Names: r.names, TempDir: t.TempDir()}
	exp := replay.Explain(ctx, rec, replay.ExplainOptions{State: checker})
	if !exp.PureCheck.Identical || !exp.PureCheck.RecordBytesIdentical {
		t.Fatalf("pure check of the truncated record: %+v", exp.PureCheck)
	}
	sc := exp.StateCheck
	if !sc.Performed || sc.Error != "" || !sc.Identical {
		t.Fatalf("state check of the truncated record: %+v", sc)
	}
	if len(sc.Scope) != 2 || !strings.Contains(strings.Join(sc.Scope, " "), "first 20 of 70 blocks") {
		t.Fatalf("state check scope: %q", sc.Scope)
	}
	tr := exp.Truncation
	if tr == nil || tr.CandidatesKept != 4 || tr.OmittedDecode != 1 || len(tr.Chains) != 1 ||
		tr.Chains[0] != (replay.TruncatedChain{BlockSize: 16, KeptBlocks: 20, TotalBlocks: 70}) || len(tr.Notes) != 2 {
		t.Fatalf("truncation: %+v", tr)
	}
	var text strings.Builder
	if err := exp.WriteText(&text); err != nil || !strings.Contains(text.String(), "keeps its first 20 of 70 blocks") ||
		!strings.Contains(text.String(), "first 20 of 70 blocks (the prefix the record keeps)") {
		t.Fatalf("text (err %v) does not say what the record left out:\n%s", err, text.String())
	}
	if replay.TruncationOf(whole) != nil {
		t.Fatal("a whole record is reported truncated")
	}
}
