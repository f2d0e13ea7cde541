package statestore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/latmodel"
)

// latencyKeys are the latency model's keys of a store (quoted, as dumpKeys writes
// them), entries and sums, with their values in hex.
func latencyKeys(t *testing.T, s *Store) map[string]string {
	out := map[string]string{}
	for k, v := range dumpKeys(t, s) {
		if strings.HasPrefix(k, `"y`) {
			out[k] = v
		}
	}
	return out
}

// TestLatencyModelReplicasAgree: two stores that apply the same log with the decisions
// and outcomes topics interleaved differently (and in other batch sizes) hold
// byte-identical latency models at equal offsets, with the same fit, and a store
// reopened from disk derives the same model again.
func TestLatencyModelReplicasAgree(t *testing.T) {
	// A window as long as the generated log, so that the model holds many samples.
	h := newHarnessWith(t, 4, Options{LatencyModel: latmodel.Config{Buckets: 100_000}})
	checkLatencyReplicasAgree(t, h, genRecords(h, 11, 4000, 10), func() {})
}

// TestLatencyModelReplicasAgreeOverCapacity: the same with ULID decision ids
// and a model that holds a few decisions a bucket, so that most facts are
// sampled out (latmodel's sample.go): which ones is a function of the log,
// so replicas that interleave the topics differently and a reopened store
// still hold the same model.
func TestLatencyModelReplicasAgreeOverCapacity(t *testing.T) {
	h := newHarnessWith(t, 4, Options{LatencyModel: latmodel.Config{BucketWidth: time.Minute, Buckets: 200, MaxEntries: 300}})
	g := newGenerator(11, 10)
	g.ulids = true
	var recs []*kgo.Record
	for _, e := range g.events(4000) {
		recs = append(recs, h.record(e.key, e.msg))
	}
	checkLatencyReplicasAgree(t, h, recs, func() {
		h.s.Read(func(View) {
			if s := h.s.st.lat.Stats(); s.Sampled == 0 || s.Full != 0 {
				t.Fatalf("model stats %+v: want facts sampled out and none dropped first-come", s)
			}
		})
	})
}

// checkLatencyReplicasAgree applies recs to h's store (then calls applied),
// replays them into stores in other interleavings, and reopens h's store:
// each holds the same model keys and fit.
func checkLatencyReplicasAgree(t *testing.T, h *harness, recs []*kgo.Record, applied func()) {
	t.Helper()
	applyInBatches(h, recs, rand.New(rand.NewPCG(11, 1)))
	applied()
	want := latencyKeys(t, h.s)
	sums := want[fmt.Sprintf("%q", keyLatencySums)]
	if len(want) < 20 || len(sums) < 200 {
		t.Fatalf("%d latency keys, sums of %d bytes: the generator teaches the model too little", len(want), len(sums))
	}
	var wantFit decider.LatencyFit
	h.s.Read(func(v View) {
		if f := v.LatencyFit(); f != nil {
			wantFit = *f
		}
	})
	if wantFit.Samples[decider.PathLocal][decider.TargetTTFT] == 0 || wantFit.Samples[decider.PathRemote][decider.TargetITL] == 0 {
		t.Fatalf("fit has no samples on a path: %v", wantFit.Samples)
	}
	for seed := uint64(1); seed <= 3; seed++ {
		s := replayStore(t, h.log, rand.New(rand.NewPCG(seed, 7)), h.opts)
		got := latencyKeys(t, s)
		if d := diffKeys(got, want); len(d) > 0 {
			t.Fatalf("interleaving %d: %d latency keys differ, first %v", seed, len(d), d[:min(len(d), 5)])
		}
		s.Read(func(v View) {
			if f := v.LatencyFit(); f == nil || *f != wantFit {
				t.Fatalf("interleaving %d: fit differs", seed)
			}
		})
	}
	h.reopen()
	if got := latencyKeys(t, h.s); got[fmt.Sprintf("%q", keyLatencySums)] != sums || len(got) != len(want) {
		t.Fatal("after reopen the model differs")
	}
	h.s.Read(func(v View) {
		if f := v.LatencyFit(); f == nil || *f != wantFit {
			t.Fatal("after reopen the fit differs")
		}
	})
}

// TestLatencyModelJoinsOutcomeBeforeDecision: an outcome read before its decision (the
// topics interleave that way) still joins, and the view counts the decode worker's
// requests and recent local prefills the model reads.
func TestLatencyModelJoinsOutcomeBeforeDecision(t *testing.T) {
	h := newHarness(t, 1)
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 16, 1))
	ref := &pb.WorkerRef{WorkerId: "d1"}
	ttft := 250.0
	h.put("d1", &pb.OutcomeEvent{RequestId: "q1", DecisionId: "x1", DecodeWorker: ref, Kind: pb.OutcomeEvent_KIND_PREFILL_DONE,
		EventTimeUnixNano: 2e9, TtftMs: &ttft})
	h.put("d1", &pb.DecisionRecord{DecisionId: "x1", RequestId: "q1", Mode: "local", DecodeWorker: ref, PromptTokens: 100,
		EffectiveIsl: 100, DecidedAtUnixNano: 1e9,
		Candidates: []*pb.Candidate{{Worker: ref, Pool: pb.Pool_POOL_DECODE, BlockSize: 16}}})
	h.s.Read(func(v View) {
		f := v.LatencyFit()
		if f == nil || f.Samples[decider.PathLocal][decider.TargetTTFT] != 1 {
			t.Fatalf("fit %+v", f)
		}
		if got := f.Coef[decider.PathLocal][decider.TargetTTFT]; got[0]*1+got[1]*100 < 200 {
			t.Fatalf("one sample of 250 ms predicts %v", got)
		}
		a := v.Active(0)
		if a.Requests != 1 || a.RecentLocalPrefill != 100 {
			t.Fatalf("active %+v", a)
		}
	})
	// 30 s of event time later the local prefill is no longer recent.
	h.put("d1", &pb.DecisionRecord{DecisionId: "x2", RequestId: "q2", Mode: "local", DecodeWorker: ref, PromptTokens: 10,
		EffectiveIsl: 10, DecidedAtUnixNano: 32e9,
		Candidates: []*pb.Candidate{{Worker: ref, Pool: pb.Pool_POOL_DECODE, BlockSize: 16}}})
	h.s.Read(func(v View) {
		if a := v.Active(0); a.RecentLocalPrefill != 10 || a.Requests != 2 {
			t.Fatalf("active %+v", a)
		}
	})
}
