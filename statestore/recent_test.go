package statestore

import (
	"math/rand/v2"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// TestRecentRequestsCountTheWindowsDecisions: a decision counts in its decode
// worker's RecentRequests and, when remote, in its prefill worker's, while it is
// within decider.RecentLocalWindow of the clock; a record read twice counts once;
// the counts are the same after a reopen and under other interleavings of the log.
func TestRecentRequestsCountTheWindowsDecisions(t *testing.T) {
	h := newHarness(t, 2)
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 16, 0))
	h.put("p1", registration("p1", pb.Pool_POOL_PREFILL, 16, 0))
	dref, pref := &pb.WorkerRef{WorkerId: "d1"}, &pb.WorkerRef{WorkerId: "p1"}
	decision := func(id, mode string, at int64) *pb.DecisionRecord {
		d := &pb.DecisionRecord{DecisionId: id, RequestId: "q" + id, Mode: mode, DecodeWorker: dref, PromptTokens: 64,
			EffectiveIsl: 64, DecidedAtUnixNano: at,
			Candidates: []*pb.Candidate{{Worker: dref, Pool: pb.Pool_POOL_DECODE, BlockSize: 16}}}
		if mode == "remote" {
			d.PrefillWorker = pref
			d.Candidates = append(d.Candidates, &pb.Candidate{Worker: pref, Pool: pb.Pool_POOL_PREFILL, BlockSize: 16})
		}
		return d
	}
	want := func(when string, decode, prefill, local int64) {
		t.Helper()
		h.s.Read(func(v View) {
			d, p := v.Active(refOf(t, v, "d1")), v.Active(refOf(t, v, "p1"))
			if d.RecentRequests != decode || p.RecentRequests != prefill || d.RecentLocalPrefill != local {
				t.Fatalf("%s: d1 recent %d (local tokens %d), p1 recent %d; want %d (%d), %d",
					when, d.RecentRequests, d.RecentLocalPrefill, p.RecentRequests, decode, local, prefill)
			}
		})
	}
	x1 := decision("x1", "remote", 1e9)
	h.put("d1", x1)
	h.put("d1", decision("x2", "local", 2e9))
	h.put("d1", decision("x3", "remote", 3e9))
	want("three decisions", 3, 2, 64)
	h.put("d1", x1)
	want("x1 read again", 3, 2, 64)
	// x1 and x2 leave the window at 31 and 32 s; x3 stays until 33 s.
	h.put("d1", decision("x4", "local", 32.5e9))
	want("at 32.5 s", 2, 1, 64)
	h.reopen()
	want("after reopen", 2, 1, 64)
	for seed := uint64(1); seed <= 3; seed++ {
		s := replayStore(t, h.log, rand.New(rand.NewPCG(seed, 11)), h.opts)
		s.Read(func(v View) {
			d, p := v.Active(refOf(t, v, "d1")), v.Active(refOf(t, v, "p1"))
			if d.RecentRequests != 2 || p.RecentRequests != 1 {
				t.Fatalf("interleaving %d: d1 %d, p1 %d recent requests", seed, d.RecentRequests, p.RecentRequests)
			}
		})
	}
}

func refOf(t *testing.T, v View, id string) decider.WorkerRef {
	t.Helper()
	for i, w := range v.Workers() {
		if w.ID == decider.WorkerID(id) {
			return decider.WorkerRef(i)
		}
	}
	t.Fatalf("no worker %q in the view", id)
	return -1
}
