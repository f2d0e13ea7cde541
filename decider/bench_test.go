package decider_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/decider/memview"
)

// benchFleet builds the acceptance scenario: a 1,000-block request (B = 16) over 128
// decode and 32 prefill workers, registered in shuffled order so that every decision
// pays for sorting. State: every decode worker holds a 64-block shared system prompt;
// one in eight holds a longer prefix of 100 to 950 blocks, partly offloaded to host and
// disk; one holds 950 blocks on device, so the prefix walk covers nearly the whole
// chain. Most workers have load samples and active requests, some share active blocks
// with the request. The cache also holds 50,000 unrelated blocks, so the index is not
// trivially small. fullChain makes every worker hold all 1,000 blocks, the worst case
// for the walk.
func benchFleet(fullChain bool) (*memview.View, decider.Request) {
	rng := rand.New(rand.NewPCG(42, 42))
	const bs, blocks = 16, 1000
	req := decider.Request{ID: "bench-request", Model: "llama", PromptTokens: blocks*bs + 5}
	chain := make([]uint64, blocks)
	for i := range chain {
		chain[i] = rng.Uint64()
	}
	req.Chains = []decider.Chain{{BlockSize: bs, Hashes: chain}}

	type w struct {
		id   string
		pool decider.Pool
	}
	var ws []w
	for i := range 128 {
		ws = append(ws, w{fmt.Sprintf("decode-%03d", i), decider.PoolDecode})
	}
	for i := range 32 {
		ws = append(ws, w{fmt.Sprintf("prefill-%02d", i), decider.PoolPrefill})
	}
	rng.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
	v := memview.New()
	for _, x := range ws {
		v.Add(decider.WorkerInfo{ID: x.id, Pool: x.pool, Model: "llama", BlockSize: bs,
			TotalKVBlocks: 16384, MaxNumBatchedTokens: 8192})
	}
	for i, x := range ws {
		switch {
		case fullChain:
			v.Store(x.id, memview.Device, chain...)
		case x.pool == decider.PoolDecode && x.id == "decode-077":
			v.Store(x.id, memview.Device, chain[:950]...)
		case i%8 == 0:
			n := 100 + rng.IntN(851)
			dev := n / 2
			v.Store(x.id, memview.Device, chain[:dev]...)
			v.Store(x.id, memview.Host, chain[dev:dev+n/4]...)
			v.Store(x.id, memview.Disk, chain[dev+n/4:n]...)
		case x.pool == decider.PoolDecode:
			v.Store(x.id, memview.Device, chain[:64]...)
		}
		// RecentRequests is derived, not drawn, so the other draws stay comparable across builds.
		v.SetActive(x.id, decider.ActiveLoad{DecodeBlocks: rng.Int64N(8000), PrefillTokens: rng.Int64N(16000), RecentRequests: int64(i % 97)})
		if i%3 == 0 {
			v.MarkActive(x.id, chain[:64]...)
		}
		if i%10 != 0 {
			v.SetLoad(x.id, decider.LoadSample{KVUsedBlocks: rng.Int64N(16000), ActivePrefillTokens: rng.Int64N(8192)})
		}
		for range 50_000 / len(ws) {
			v.Store(x.id, memview.Device, rng.Uint64())
		}
	}
	return v, req
}

func benchConfig() decider.Config {
	cfg := decider.DefaultConfig()
	cfg.ConditionalDisagg = true
	cfg.Disagg.Policy = decider.PolicyISLOrLoad
	cfg.Disagg.PrefillBusyThreshold = decider.Some(0.8)
	cfg.Disagg.DecodeBusyThreshold = decider.Some(0.9)
	cfg.Disagg.DecodeBusySource = decider.BusySourceMax
	return cfg
}

// benchSLO is benchConfig under the slo policy, with a warm latency model on v, so that
// the policy predicts for the local path and all 32 prefill candidates.
func benchSLO(v *memview.View) decider.Config {
	cfg := benchConfig()
	cfg.Disagg.Policy = decider.PolicySLO
	f := &decider.LatencyFit{}
	for p := range f.Samples {
		for t := range f.Samples[p] {
			f.Samples[p][t], f.Sigma[p][t], f.Mean[p][t] = 1000, 100, 900
			for i := range f.Coef[p][t] {
				f.Coef[p][t][i] = 0.01 * float64(i+1)
			}
		}
	}
	v.SetLatencyFit(f)
	return cfg
}

// BenchmarkDecide measures one decision in steady state (the Decision is reused, so it
// should not allocate) and reports the p50 and p99 of the per-decision latency. The bar
// of the acceptance criteria is p99 ≤ 30 µs.
func BenchmarkDecide(b *testing.B) {
	for _, bc := range []struct {
		name string
		full bool
		slo  bool
	}{{"mixed", false, false}, {"every-worker-holds-full-chain", true, false}, {"slo-warm-mixed", false, true}} {
		b.Run(bc.name, func(b *testing.B) {
			v, req := benchFleet(bc.full)
			cfg := benchConfig()
			if bc.slo {
				cfg = benchSLO(v)
			}
			dc, err := decider.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			var d decider.Decision
			if err := dc.DecideInto(&d, v, &req); err != nil { // warm the scratch space
				b.Fatal(err)
			}
			if len(d.Candidates) != 160 {
				b.Fatalf("%d candidates", len(d.Candidates))
			}
			samples := make([]time.Duration, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := dc.DecideInto(&d, v, &req); err != nil {
					b.Fatal(err)
				}
				samples[i] = time.Since(start)
			}
			b.StopTimer()
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

// TestDecideDoesNotAllocate holds the zero-allocation goal as a test, so that a change
// that allocates on the hot path fails CI rather than only a benchmark nobody reads.
func TestDecideDoesNotAllocate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the benchmark fleet")
	}
	v, req := benchFleet(false)
	dc := mustNew(t, benchConfig())
	var d decider.Decision
	if err := dc.DecideInto(&d, v, &req); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(50, func() {
		if err := dc.DecideInto(&d, v, &req); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("DecideInto allocates %v times per decision in steady state", allocs)
	}
	dcSLO := mustNew(t, benchSLO(v))
	if err := dcSLO.DecideInto(&d, v, &req); err != nil || !d.SLO.Warm {
		t.Fatalf("slo: %v, warm %v", err, d.SLO.Warm)
	}
	allocs = testing.AllocsPerRun(50, func() {
		if err := dcSLO.DecideInto(&d, v, &req); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("DecideInto under slo allocates %v times per decision in steady state", allocs)
	}
	var buf []byte
	allocs = testing.AllocsPerRun(50, func() { buf = d.AppendCanonicalJSON(buf[:0]) })
	if allocs != 0 {
		t.Fatalf("AppendCanonicalJSON allocates %v times with a reused buffer", allocs)
	}
}
