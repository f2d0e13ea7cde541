package decider_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/decider/memview"
)

func mustNew(t testing.TB, cfg decider.Config) *decider.Decider {
	t.Helper()
	dc, err := decider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dc
}

// twins is a fleet of identical decode workers, so every cost ties.
func twins(n int) *memview.View {
	v := memview.New()
	for i := range n {
		v.Add(decider.WorkerInfo{ID: fmt.Sprintf("d%d", i), Pool: decider.PoolDecode, Model: "m", BlockSize: 16, TotalKVBlocks: 100})
	}
	v.Add(decider.WorkerInfo{ID: "p0", Pool: decider.PoolPrefill, Model: "m", BlockSize: 16})
	return v
}

// The documented tie-break key, recomputed independently of the package.
func documentedTieHash(requestID, worker string) uint64 {
	return xxh3.HashStringSeed(worker, xxh3.HashStringSeed(requestID, 0x7064722d74696531))
}

func TestTieBreakIsLowestHashOfRequestAndWorker(t *testing.T) {
	dc := mustNew(t, decider.DefaultConfig())
	v := twins(4)
	picks := map[string]int{}
	for i := range 400 {
		req := decider.Request{ID: fmt.Sprintf("r%d", i), Model: "m", PromptTokens: 64}
		d, err := dc.Decide(v, &req)
		if err != nil {
			t.Fatal(err)
		}
		want, best := "", uint64(math.MaxUint64)
		for w := range 4 {
			id := fmt.Sprintf("d%d", w)
			if h := documentedTieHash(req.ID, id); h < best {
				want, best = id, h
			}
		}
		if d.DecodeWorker != want {
			t.Fatalf("%s: picked %s, want %s (lowest documented tie hash)", req.ID, d.DecodeWorker, want)
		}
		picks[d.DecodeWorker]++
	}
	// Hashing with the request id spreads ties instead of piling them on one worker.
	for w := range 4 {
		if n := picks[fmt.Sprintf("d%d", w)]; n < 60 {
			t.Errorf("worker d%d won %d of 400 ties; the tie-break does not spread", w, n)
		}
	}
}

// Golden: the tie hash is part of the replay contract. If this changes, recorded
// decisions no longer replay to the same worker.
func TestTieHashGolden(t *testing.T) {
	dc := mustNew(t, decider.DefaultConfig())
	req := decider.Request{ID: "req-1", Model: "m", PromptTokens: 64}
	d, err := dc.Decide(twins(1), &req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := uint64(d.Candidates[0].TieHash), uint64(0x7cd262c4f51feb4b); got != documentedTieHash("req-1", "d0") || got != want {
		t.Fatalf("tie hash of (req-1, d0) = %016x, want %016x", got, want)
	}
}

func TestTieBreakStableAcrossCallsAndOrders(t *testing.T) {
	dc := mustNew(t, decider.DefaultConfig())
	req := decider.Request{ID: "stable", Model: "m", PromptTokens: 64}
	first, err := dc.Decide(twins(8), &req)
	if err != nil {
		t.Fatal(err)
	}
	// Same workers, reversed registration order.
	v := memview.New()
	v.Add(decider.WorkerInfo{ID: "p0", Pool: decider.PoolPrefill, Model: "m", BlockSize: 16})
	for i := 7; i >= 0; i-- {
		v.Add(decider.WorkerInfo{ID: fmt.Sprintf("d%d", i), Pool: decider.PoolDecode, Model: "m", BlockSize: 16, TotalKVBlocks: 100})
	}
	for range 3 {
		again, err := dc.Decide(v, &req)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first.AppendCanonicalJSON(nil), again.AppendCanonicalJSON(nil)) {
			t.Fatalf("tie broken differently:\n%s\n%s", first.AppendCanonicalJSON(nil), again.AppendCanonicalJSON(nil))
		}
	}
}

func TestTemperatureReproduciblePerRequestID(t *testing.T) {
	cfg := decider.DefaultConfig()
	cfg.Temperature = 0.5
	dc := mustNew(t, cfg)
	rng := rand.New(rand.NewPCG(7, 7))
	f := randomFleet(rng, 16, 4)
	for i := range f.workers {
		f.workers[i].info.Model, f.workers[i].info.Unavailable = "m", false
	}
	first, err := dc.Decide(f.view(nil), &f.req)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, c := range first.Candidates {
		if c.Pool == decider.PoolDecode {
			sum += c.Probability
		}
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Fatalf("decode probabilities sum to %v", sum)
	}
	for range 5 {
		again, err := dc.Decide(f.view(rng.Perm(len(f.workers))), &f.req)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first.AppendCanonicalJSON(nil), again.AppendCanonicalJSON(nil)) {
			t.Fatal("the same request id sampled a different decision")
		}
	}
}

// At temperature > 0 the draws follow the softmax probabilities across request ids.
func TestTemperatureSamplesSoftmax(t *testing.T) {
	cfg := decider.DefaultConfig()
	cfg.Temperature = 1
	dc := mustNew(t, cfg)
	v := memview.New()
	v.Add(decider.WorkerInfo{ID: "cheap", Pool: decider.PoolDecode, Model: "m", BlockSize: 16})
	v.Add(decider.WorkerInfo{ID: "dear", Pool: decider.PoolDecode, Model: "m", BlockSize: 16})
	v.SetActive("dear", decider.ActiveLoad{DecodeBlocks: 100})
	// Normalized costs 0 and 1: p(cheap) = 1 / (1 + e^-1).
	want := 1 / (1 + math.Exp(-1))
	const n = 4000
	cheap := 0
	for i := range n {
		req := decider.Request{ID: fmt.Sprintf("t%d", i), Model: "m", PromptTokens: 64}
		d, err := dc.Decide(v, &req)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && math.Abs(d.Candidates[0].Probability-want) > 1e-12 {
			t.Fatalf("p(cheap) = %v, want %v", d.Candidates[0].Probability, want)
		}
		if d.DecodeWorker == "cheap" {
			cheap++
		}
	}
	if got := float64(cheap) / n; math.Abs(got-want) > 0.03 {
		t.Fatalf("cheap picked %.3f of the time, want %.3f", got, want)
	}
}

func TestTemperatureEqualCostsIsUniform(t *testing.T) {
	cfg := decider.DefaultConfig()
	cfg.Temperature = 0.1
	dc := mustNew(t, cfg)
	req := decider.Request{ID: "u", Model: "m", PromptTokens: 64}
	d, err := dc.Decide(twins(4), &req)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Candidates[:4] {
		if c.Probability != 0.25 {
			t.Fatalf("%s: probability %v, want 0.25", c.Worker, c.Probability)
		}
	}
}

func TestNonKVModesUseRendezvousHashing(t *testing.T) {
	for _, mode := range []decider.RouterMode{decider.RouterModeRoundRobin, decider.RouterModeRandom} {
		cfg := decider.DefaultConfig()
		cfg.RouterMode = mode
		dc := mustNew(t, cfg)
		v := twins(3)
		v.SetActive("d0", decider.ActiveLoad{DecodeBlocks: 1e6}) // the cost would avoid d0
		for i := range 50 {
			req := decider.Request{ID: fmt.Sprintf("r%d", i), Model: "m", PromptTokens: 64}
			d, err := dc.Decide(v, &req)
			if err != nil {
				t.Fatal(err)
			}
			want, best := "", uint64(math.MaxUint64)
			for w := range 3 {
				if h := documentedTieHash(req.ID, fmt.Sprintf("d%d", w)); h < best {
					want, best = fmt.Sprintf("d%d", w), h
				}
			}
			if d.DecodeWorker != want {
				t.Fatalf("%s %s: picked %s, want %s", mode, req.ID, d.DecodeWorker, want)
			}
		}
	}
}

func TestInvalidRequests(t *testing.T) {
	dc := mustNew(t, decider.DefaultConfig())
	v := twins(1)
	for name, req := range map[string]decider.Request{
		"negative_prompt":       {PromptTokens: -1, Model: "m"},
		"chain_longer_than_P":   {PromptTokens: 31, Model: "m", Chains: []decider.Chain{{BlockSize: 16, Hashes: []uint64{1, 2}}}},
		"zero_block_size":       {PromptTokens: 32, Model: "m", Chains: []decider.Chain{{BlockSize: 0}}},
		"duplicate_block_sizes": {PromptTokens: 32, Model: "m", Chains: []decider.Chain{{BlockSize: 16}, {BlockSize: 16}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := dc.Decide(v, &req)
			var re *decider.RequestError
			if !errors.Is(err, decider.ErrInvalidRequest) || !errors.As(err, &re) {
				t.Fatalf("got %v, want a RequestError", err)
			}
		})
	}
}

func TestNoDecodeWorkerErrorSaysWhy(t *testing.T) {
	dc := mustNew(t, decider.DefaultConfig())
	v := memview.New()
	v.Add(decider.WorkerInfo{ID: "d0", Pool: decider.PoolDecode, Model: "m", BlockSize: 16, Unavailable: true})
	v.Add(decider.WorkerInfo{ID: "d1", Pool: decider.PoolDecode, Model: "m"})
	_, err := dc.Decide(v, &decider.Request{ID: "r", Model: "m", PromptTokens: 10})
	var nw *decider.NoWorkerError
	if !errors.Is(err, decider.ErrNoDecodeWorker) || !errors.As(err, &nw) {
		t.Fatalf("got %v", err)
	}
	if nw.Registered != 2 || nw.Unavailable != 1 || nw.NoBlockSize != 1 {
		t.Fatalf("counts %+v", *nw)
	}
	if !strings.Contains(err.Error(), "2 registered, 0 unhealthy, 1 unavailable, 1 without a block size") {
		t.Fatalf("message %q", err)
	}
	_, err = dc.Decide(v, &decider.Request{ID: "r", Model: "nope"})
	if !strings.Contains(fmt.Sprint(err), `no decode worker is registered for model "nope"`) {
		t.Fatalf("message %q", err)
	}
}

// DecideInto reuses the Decision: deciding A, then B, then A again gives A's bytes.
func TestDecideIntoReuseLeavesNoResidue(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	dc := mustNew(t, randomConfig(rng))
	fa, fb := randomFleet(rng, 10, 4), randomFleet(rng, 3, 0)
	va, vb := fa.view(nil), fb.view(nil)
	var d decider.Decision
	if err := dc.DecideInto(&d, va, &fa.req); err != nil {
		t.Fatal(err)
	}
	want := d.AppendCanonicalJSON(nil)
	if err := dc.DecideInto(&d, vb, &fb.req); err != nil {
		t.Fatal(err)
	}
	if err := dc.DecideInto(&d, va, &fa.req); err != nil {
		t.Fatal(err)
	}
	if got := d.AppendCanonicalJSON(nil); !bytes.Equal(got, want) {
		t.Fatalf("reused decision differs:\n got %s\nwant %s", got, want)
	}
}

// A decider is shared by goroutines; each owns its Decision. Run with -race.
func TestConcurrentDecisions(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	f := randomFleet(rng, 20, 5)
	cfg := randomConfig(rng)
	dc := mustNew(t, cfg)
	v := f.view(nil)
	want, err := dc.Decide(v, &f.req)
	if err != nil {
		t.Skip("fleet has no decode worker")
	}
	wantJSON := want.AppendCanonicalJSON(nil)
	done := make(chan []byte, 8)
	for range 8 {
		go func() {
			var d decider.Decision
			var last []byte
			for range 50 {
				if err := dc.DecideInto(&d, v, &f.req); err != nil {
					panic(err)
				}
				last = d.AppendCanonicalJSON(last[:0])
			}
			done <- last
		}()
	}
	for range 8 {
		if got := <-done; !bytes.Equal(got, wantJSON) {
			t.Fatal("concurrent decision differs")
		}
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	cfg := decider.DefaultConfig()
	cfg.Disagg.EffISLRatioThreshold = 2
	if _, err := decider.New(cfg); err == nil {
		t.Fatal("New accepted an out-of-range ratio threshold")
	}
}
