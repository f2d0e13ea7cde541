package replay_test

import (
	"os"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/replay"
)

// TestVersion1RecordStaysExplainable: a decision recorded by decider version 1 (cost in
// blocks) recomputes with version 1's arithmetic, byte for byte, although this build
// decides with a later version that picks another worker for the same inputs.
//
// The fixture was written by the build of commit 9f692a9 (decider version 1): the real
// decider and replay.RecordOf over a memview with an SGLang worker (page size 1) holding
// the whole 100-token prompt beside two empty vLLM workers (block size 16). Version 1
// sent it to an empty vLLM worker.
func TestVersion1RecordStaysExplainable(t *testing.T) {
	raw, err := os.ReadFile("testdata/decision-v1-mixed-block-sizes.pb")
	if err != nil {
		t.Fatal(err)
	}
	rec := new(pb.DecisionRecord)
	if err := proto.Unmarshal(raw, rec); err != nil {
		t.Fatal(err)
	}
	if rec.GetDeciderVersion() != 1 || workerOf(rec.GetDecodeWorker()) != "vllm-2" {
		t.Fatalf("fixture: version %d decode %s", rec.GetDeciderVersion(), workerOf(rec.GetDecodeWorker()))
	}

	pc, _ := replay.CheckPure(rec)
	if pc.Error != "" || !pc.Identical || !pc.RecordBytesIdentical || !pc.ConfigHashMatches {
		t.Fatalf("a version 1 record must recompute as it was decided: %+v", pc)
	}

	// The same inputs under the current version: the worker holding the prompt wins.
	cfg, err := replay.ParseConfig(rec.GetConfigJson())
	if err != nil {
		t.Fatal(err)
	}
	now, err := decider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := replay.RecomputeWith(now, rec, new(decider.Decision))
	if err != nil {
		t.Fatal(err)
	}
	if d.DecodeWorker != "sglang-1" || d.CachedTokens != 100 {
		t.Fatalf("version %d: decode %s cached %d; want sglang-1 with 100 cached tokens", replay.DeciderVersion, d.DecodeWorker, d.CachedTokens)
	}
}

func workerOf(w *pb.WorkerRef) string { return w.GetWorkerId() }
