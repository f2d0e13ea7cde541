package sim

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/kvhash"
)

// TestMooncakeSharedPrefixes: on the sample trace, requests whose hash_ids share a
// leading run share exactly that token prefix (and the router's chains agree up to
// it, for vLLM's block size), requests with different first ids share nothing, and an
// input_length that is not a multiple of 512 ends inside its last id's block.
func TestMooncakeSharedPrefixes(t *testing.T) {
	w := loadSample(t)
	if len(w.Requests) != sampleRequests {
		t.Fatalf("%d requests, want %d", len(w.Requests), sampleRequests)
	}
	checkSharedPrefixes(t, w)
	tails := 0
	for _, r := range w.Requests {
		if tail := r.PromptLen % MooncakeBlockTokens; tail != 0 {
			tails++
			if n := len(r.Prompt); n != (r.PromptLen+MooncakeBlockTokens-1)/MooncakeBlockTokens || r.Prompt[n-1].Len != tail {
				t.Errorf("%s: %d tokens in %d segments, last %d", r.ID, r.PromptLen, n, r.Prompt[n-1].Len)
			}
		}
	}
	if tails == 0 {
		t.Error("no request ends inside a block")
	}
}

// TestMooncakeRealTraceSharedPrefixes is the same check on the published trace, with
// the figures of its first request.
func TestMooncakeRealTraceSharedPrefixes(t *testing.T) {
	w := loadRealTrace(t)
	if len(w.Requests) != 3993 {
		t.Fatalf("%d requests, want 3993", len(w.Requests))
	}
	checkSharedPrefixes(t, w)
	// A tail: input_length not a multiple of 512 ends inside its last id.
	r0 := w.Requests[0]
	if r0.PromptLen != 40160 || len(r0.Prompt) != 79 || r0.Prompt[78].Len != 40160-78*512 {
		t.Errorf("first request: %d tokens in %d segments, last %d", r0.PromptLen, len(r0.Prompt), r0.Prompt[len(r0.Prompt)-1].Len)
	}
}

// checkSharedPrefixes checks every request's segments against its lengths, and at
// least 20 pairs of requests that share a leading run of ids and 20 that do not.
func checkSharedPrefixes(t *testing.T, w *Workload) {
	t.Helper()
	for _, r := range w.Requests {
		n := 0
		for _, s := range r.Prompt {
			n += s.Len
		}
		if n != r.PromptLen || r.OutputLen < 1 {
			t.Fatalf("%s: segments hold %d tokens, input_length %d", r.ID, n, r.PromptLen)
		}
	}
	ids := func(r *Request) []uint64 {
		var out []uint64
		for _, s := range r.Prompt {
			out = append(out, s.Seed)
		}
		return out
	}
	// Find pairs in the first 1000 requests: sharing a leading run, and not.
	checkedShared, checkedDistinct := 0, 0
	reqs := w.Requests[:min(len(w.Requests), 1000)]
	for i := 0; i < len(reqs) && (checkedShared < 20 || checkedDistinct < 20); i++ {
		for j := i + 1; j < len(reqs) && j < i+200; j++ {
			a, b := reqs[i], reqs[j]
			sa, sb := ids(a), ids(b)
			run := 0
			for run < min(len(sa), len(sb)) && sa[run] == sb[run] {
				run++
			}
			if (run > 0 && checkedShared >= 20) || (run == 0 && checkedDistinct >= 20) {
				continue
			}
			ta, tb := a.Tokens(), b.Tokens()
			common := 0
			for common < min(len(ta), len(tb)) && ta[common] == tb[common] {
				common++
			}
			switch {
			case run > 0 && checkedShared < 20:
				checkedShared++
				// The shared ids cover run·512 tokens, less if one prompt ends inside them.
				want := 0
				for k := range run {
					want += min(a.Prompt[k].Len, b.Prompt[k].Len)
				}
				if common < want {
					t.Errorf("%s/%s share %d ids (%d tokens) but only %d tokens", a.ID, b.ID, run, want, common)
				}
				ca, cb := kvhash.Chain(nil, ta, 16, 0, false), kvhash.Chain(nil, tb, 16, 0, false)
				k := want / 16
				if !slices.Equal(ca[:k], cb[:k]) {
					t.Errorf("%s/%s: chains differ within the shared %d blocks", a.ID, b.ID, k)
				}
				if run < min(len(sa), len(sb)) && common >= want+16 && len(ca) > k && len(cb) > k && ca[k] == cb[k] {
					t.Errorf("%s/%s: chains agree past the shared ids", a.ID, b.ID)
				}
			case run == 0 && checkedDistinct < 20:
				checkedDistinct++
				if common >= 16 {
					t.Errorf("%s/%s share no id but %d leading tokens", a.ID, b.ID, common)
				}
				ca, cb := kvhash.Chain(nil, ta, 16, 0, false), kvhash.Chain(nil, tb, 16, 0, false)
				if len(ca) > 0 && len(cb) > 0 && ca[0] == cb[0] {
					t.Errorf("%s/%s: first blocks hash alike", a.ID, b.ID)
				}
			}
		}
	}
	if checkedShared < 20 || checkedDistinct < 20 {
		t.Fatalf("found only %d sharing and %d distinct pairs", checkedShared, checkedDistinct)
	}
}

// TestReadMooncakeTail: an input longer than its ids gets a unique tail; a shorter one
// truncates the last id's block; bad lines are refused.
func TestReadMooncakeTail(t *testing.T) {
	w, err := ReadMooncake(strings.NewReader(`{"timestamp": 5, "input_length": 600, "output_length": 2, "hash_ids": [7]}
{"timestamp": 1, "input_length": 100, "output_length": 0, "hash_ids": [7, 8]}
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := w.Requests[1], w.Requests[0] // sorted by timestamp
	if a.Arrival != 5*time.Millisecond || len(a.Prompt) != 2 || a.Prompt[1].Len != 88 {
		t.Errorf("long tail: %+v", a)
	}
	if b.PromptLen != 100 || len(b.Prompt) != 1 || b.OutputLen != 1 {
		t.Errorf("short: %+v", b)
	}
	if ta, tb := a.Tokens(), b.Tokens(); !slices.Equal(ta[:100], tb) {
		t.Error("the shared id does not give the same first 100 tokens")
	}
	if _, err := ReadMooncake(strings.NewReader(`{"timestamp": 1}` + "\n")); err == nil {
		t.Error("a line without lengths was accepted")
	}
}

// TestSyntheticWorkload: the generator is seeded, sessions grow their context turn by
// turn (each prompt extends the previous prompt and answer), and system prompts are
// shared across sessions.
func TestSyntheticWorkload(t *testing.T) {
	cfg := DefaultSynthetic()
	cfg.Duration = 30 * time.Second
	a, err := Synthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Synthetic(cfg)
	if len(a.Requests) == 0 || len(a.Requests) != len(b.Requests) {
		t.Fatalf("%d vs %d requests", len(a.Requests), len(b.Requests))
	}
	for i := range a.Requests {
		if a.Requests[i].ID != b.Requests[i].ID || !slices.Equal(a.Requests[i].Prompt, b.Requests[i].Prompt) {
			t.Fatal("same seed, different workloads")
		}
	}
	bySession := map[string][]*Request{}
	sys := map[uint64]int{}
	agents := 0
	for _, r := range a.Requests {
		bySession[r.Session] = append(bySession[r.Session], r)
		sys[r.Prompt[0].Seed]++
		if strings.HasPrefix(r.Session, "agent") {
			agents++
		}
	}
	for s, rs := range bySession {
		for i := 1; i < len(rs); i++ {
			prev, cur := rs[i-1], rs[i]
			if cur.Arrival < prev.Arrival || len(cur.Prompt) != len(prev.Prompt)+2 ||
				!slices.Equal(cur.Prompt[:len(prev.Prompt)], prev.Prompt) || cur.Prompt[len(prev.Prompt)].Seed != prev.Output {
				t.Fatalf("session %s turn %d does not extend turn %d with its answer", s, i, i-1)
			}
		}
	}
	if len(sys) > cfg.SystemPrompts || agents == 0 || agents == len(a.Requests) {
		t.Errorf("%d system prompts, %d agent requests of %d", len(sys), agents, len(a.Requests))
	}
	cfg.Seed = 2
	c, _ := Synthetic(cfg)
	if len(c.Requests) == len(a.Requests) && slices.Equal(c.Requests[0].Prompt, a.Requests[0].Prompt) && c.Requests[0].Arrival == a.Requests[0].Arrival {
		t.Error("another seed gave the same workload")
	}
}

// TestSpread: requests stamped at one instant arrive one after another, in their
// order, before the next instant and within the window; the same seed draws the same
// arrivals, another seed others; and as in a Poisson stream some arrive close together
// (ticks of 10 requests over 3 s: a gap under 50 ms has probability
// 1 − e^(−10·0.05/3) ≈ 15%).
func TestSpread(t *testing.T) {
	w := &Workload{Name: "ticks"}
	for tick := range 200 {
		for k := range 10 {
			w.Requests = append(w.Requests, &Request{ID: fmt.Sprint(tick*10 + k), Arrival: time.Duration(tick) * 3 * time.Second})
		}
	}
	// The last tick spreads over the window.
	w.Requests = append(w.Requests, &Request{ID: "last", Arrival: 600 * time.Second}, &Request{ID: "last2", Arrival: 600 * time.Second})
	if w.Spread(0, 1) != w {
		t.Errorf("Spread(0) is not the workload as it is")
	}
	s := w.Spread(3*time.Second, 1)
	close := 0
	for i, r := range s.Requests {
		orig := w.Requests[i]
		if r.ID != orig.ID || r.Arrival < orig.Arrival || r.Arrival >= orig.Arrival+3*time.Second {
			t.Fatalf("request %d: %s at %s; was %s at %s", i, r.ID, r.Arrival, orig.ID, orig.Arrival)
		}
		if i > 0 {
			gap := r.Arrival - s.Requests[i-1].Arrival
			if gap < 0 {
				t.Fatalf("request %d arrives %s before the one before it", i, -gap)
			}
			if gap < 50*time.Millisecond && r.Arrival/(3*time.Second) == s.Requests[i-1].Arrival/(3*time.Second) {
				close++
			}
		}
	}
	if share := float64(close) / (200 * 9); share < 0.08 || share > 0.25 {
		t.Errorf("%.1f%% of gaps within a tick under 50 ms; a Poisson stream has ~15%%", 100*share)
	}
	if w.Requests[1].Arrival != 0 || s.Name != w.Name || len(s.Requests) != len(w.Requests) {
		t.Errorf("Spread changed its input or lost requests")
	}
	if again := w.Spread(3*time.Second, 1); !reflect.DeepEqual(again, s) {
		t.Errorf("the same seed drew other arrivals")
	}
	if other := w.Spread(3*time.Second, 2); reflect.DeepEqual(other, s) {
		t.Errorf("another seed drew the same arrivals")
	}
}
