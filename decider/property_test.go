package decider_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
)

// Property: permuting the order in which the view lists workers never changes the
// decision, down to the bytes of its canonical encoding (design.md, invariant 1).
func TestPropertyWorkerOrderNeverChangesTheDecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(20240601, 1))
	for iter := range 300 {
		f := randomFleet(rng, 1+rng.IntN(12), rng.IntN(6))
		cfg := randomConfig(rng)
		dc, err := decider.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		want, errWant := dc.Decide(f.view(nil), &f.req)
		var wantJSON []byte
		if errWant == nil {
			wantJSON = want.AppendCanonicalJSON(nil)
		}
		var reused decider.Decision // also through a reused Decision and its cached order
		for range 4 {
			order := rng.Perm(len(f.workers))
			got := &reused
			err := dc.DecideInto(got, f.view(order), &f.req)
			if (err == nil) != (errWant == nil) {
				t.Fatalf("iter %d: error %v under order %v, %v in order", iter, err, order, errWant)
			}
			if err != nil {
				continue
			}
			if gotJSON := got.AppendCanonicalJSON(nil); !bytes.Equal(gotJSON, wantJSON) {
				t.Fatalf("iter %d: order %v changed the decision:\n got %s\nwant %s", iter, order, gotJSON, wantJSON)
			}
		}
	}
}

// Property: under isl_bounding with the decode guard off, more overlap on the decode
// worker never turns a local decision into a remote one. More overlap only lowers the
// chosen worker's cost, so it stays chosen, and its credit C only grows, so eff and the
// ratio only shrink. Two things are not "more overlap" and are left out: more overlap on
// another worker may move the request to a worker whose credit is smaller (the cost
// function's choice), and promoting a block from host to device lowers its cost credit
// when overlap_score_credit < 0.75.
func TestPropertyMoreOverlapNeverTurnsLocalIntoRemote(t *testing.T) {
	rng := rand.New(rand.NewPCG(20240601, 2))
	checked := 0
	for iter := range 1500 {
		f := randomFleet(rng, 1+rng.IntN(6), 1+rng.IntN(3))
		cfg := randomConfig(rng)
		cfg.Disagg.Policy = decider.PolicyISLBounding
		cfg.Disagg.DecodeBusyThreshold = decider.OptFloat{}
		cfg.Temperature = 0
		dc, err := decider.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		before, err := dc.Decide(f.view(nil), &f.req)
		if err != nil {
			continue
		}
		var w *workerState
		for i := range f.workers {
			if f.workers[i].info.ID == before.DecodeWorker {
				w = &f.workers[i]
			}
		}
		full := int(f.req.PromptTokens / int64(w.info.BlockSize))
		// Grow the overlap: extend the leading run by n blocks, in the lowest tier the
		// run has reached so far (the run stays device, then host, then disk).
		n := rng.IntN(full - w.device - w.host - w.dsk + 1)
		switch {
		case w.host == 0 && w.dsk == 0 && rng.IntN(2) == 0:
			w.device += n
		case w.dsk == 0 && rng.IntN(2) == 0:
			w.host += n
		default:
			w.dsk += n
		}
		after, err := dc.Decide(f.view(nil), &f.req)
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		if after.CachedTokens < before.CachedTokens {
			t.Fatalf("iter %d: credit fell from %d to %d:\nbefore %s\nafter  %s", iter, before.CachedTokens, after.CachedTokens, before.AppendCanonicalJSON(nil), after.AppendCanonicalJSON(nil))
		}
		if before.Mode == decider.ModeLocal && after.Mode != decider.ModeLocal {
			t.Fatalf("iter %d: more overlap turned local into %s:\nbefore %s\nafter  %s", iter, after.Mode,
				before.AppendCanonicalJSON(nil), after.AppendCanonicalJSON(nil))
		}
		if before.Mode == decider.ModeLocal {
			checked++
		}
	}
	if checked < 50 {
		t.Fatalf("only %d local decisions were checked; the generator no longer exercises the property", checked)
	}
}
