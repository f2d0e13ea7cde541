package decider_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/decider/memview"
)

// workerState is everything a fleet generator sets for one worker, so that the same
// fleet can be loaded into views in different orders.
type workerState struct {
	info              decider.WorkerInfo
	device, host, dsk int // leading blocks of the request chain held per tier
	active            decider.ActiveLoad
	shared            int
	load              *decider.LoadSample
}

type fleet struct {
	workers []workerState
	req     decider.Request
	fit     *decider.LatencyFit
}

// chainFor returns a chained-looking hash sequence for a block size.
func testChain(blockSize int, prompt int64) []uint64 {
	h := make([]uint64, prompt/int64(blockSize))
	for i := range h {
		h[i] = uint64(blockSize)<<40 | uint64(i+1)
	}
	return h
}

// view loads the fleet into a memview, adding workers in the given order (nil: as is).
func (f *fleet) view(order []int) *memview.View {
	v := memview.New()
	if order == nil {
		order = make([]int, len(f.workers))
		for i := range order {
			order[i] = i
		}
	}
	for _, i := range order {
		v.Add(f.workers[i].info)
	}
	for _, i := range order {
		w := &f.workers[i]
		if w.info.BlockSize <= 0 {
			continue
		}
		chain := testChain(w.info.BlockSize, f.req.PromptTokens)
		v.Store(w.info.ID, memview.Device, chain[:w.device]...)
		v.Store(w.info.ID, memview.Host, chain[w.device:w.device+w.host]...)
		v.Store(w.info.ID, memview.Disk, chain[w.device+w.host:w.device+w.host+w.dsk]...)
		v.SetActive(w.info.ID, w.active)
		v.MarkActive(w.info.ID, chain[:w.shared]...)
		if w.load != nil {
			v.SetLoad(w.info.ID, *w.load)
		}
	}
	v.SetLatencyFit(f.fit)
	return v
}

// randomFleet draws a fleet and a request from rng: a mix of block sizes, models,
// unknown capacities, missing load samples and unavailable workers, so that every
// branch of the decider is exercised.
func randomFleet(rng *rand.Rand, nDecode, nPrefill int) *fleet {
	f := &fleet{}
	sizes := []int{16, 16, 32}
	f.req = decider.Request{ID: fmt.Sprintf("req-%d", rng.Uint64()), Model: "m", PromptTokens: rng.Int64N(8000)}
	add := func(pool decider.Pool, i int) {
		bs := sizes[rng.IntN(len(sizes))]
		full := int(f.req.PromptTokens / int64(bs))
		w := workerState{info: decider.WorkerInfo{
			ID: fmt.Sprintf("%s-%03d", pool, i), Pool: pool, Model: "m", BlockSize: bs,
		}}
		if rng.IntN(10) == 0 {
			w.info.Model = "other"
		}
		if rng.IntN(12) == 0 {
			w.info.Unavailable = true
		}
		if rng.IntN(5) != 0 {
			w.info.TotalKVBlocks = 500 + rng.Int64N(2000)
		}
		if rng.IntN(5) != 0 {
			w.info.MaxNumBatchedTokens = 2048 << rng.IntN(3)
		}
		w.device = rng.IntN(full + 1)
		w.host = rng.IntN(full - w.device + 1)
		w.dsk = rng.IntN(full - w.device - w.host + 1)
		w.active = decider.ActiveLoad{DecodeBlocks: rng.Int64N(1500), PrefillTokens: rng.Int64N(20000)}
		w.shared = rng.IntN(full + 1)
		if rng.IntN(4) != 0 {
			w.load = &decider.LoadSample{KVUsedBlocks: rng.Int64N(2000), ActivePrefillTokens: rng.Int64N(20000)}
		}
		f.workers = append(f.workers, w)
	}
	for i := range nDecode {
		add(decider.PoolDecode, i)
	}
	for i := range nPrefill {
		add(decider.PoolPrefill, i)
	}
	for _, bs := range []int{16, 32} {
		f.req.Chains = append(f.req.Chains, decider.Chain{BlockSize: bs, Hashes: testChain(bs, f.req.PromptTokens)})
	}
	f.fit = randomFit(uint64(f.req.PromptTokens), uint64(nDecode*8+nPrefill))
	for i := range f.workers {
		f.workers[i].active.Requests = int64(f.workers[i].active.DecodeBlocks / 40)
	}
	return f
}

// randomFit draws a latency model fit, or nil, from its own generator, so that the
// draws of the fleet stay what they were before fits existed.
func randomFit(s1, s2 uint64) *decider.LatencyFit {
	rng := rand.New(rand.NewPCG(s1, s2))
	if rng.IntN(3) == 0 {
		return nil
	}
	f := &decider.LatencyFit{}
	for p := range f.Samples {
		for t := range f.Samples[p] {
			f.Samples[p][t] = 100 + rng.Int64N(600)
			f.Sigma[p][t] = rng.Float64() * []float64{500, 300}[t] * float64(rng.IntN(2))
			scale := []float64{1500, 60}[t] // TTFT, ITL: around their default SLOs
			f.Coef[p][t][0] = rng.Float64() * scale
			for i := 1; i < decider.LatencyK; i++ {
				f.Coef[p][t][i] = rng.Float64() * scale / 10000
			}
			if t == int(decider.TargetITL) {
				// Prompts queued on the decode worker slow its steps: what the ITL
				// guard is about.
				f.Coef[p][t][6] = rng.Float64() * 0.02
				f.Coef[p][t][9] = rng.Float64() * 0.02
			}
		}
	}
	// A third of the fits come from a fleet that prefills remotely nearly always
	// (local under a twentieth of the TTFT samples), where the queue cap applies.
	if rng.IntN(3) == 0 {
		f.Samples[decider.PathRemote][decider.TargetTTFT] = 20 * f.Samples[decider.PathLocal][decider.TargetTTFT]
	}
	return f
}

// randomConfig draws a valid config with the feature on.
func randomConfig(rng *rand.Rand) decider.Config {
	cfg := decider.DefaultConfig()
	cfg.ConditionalDisagg = true
	policies := decider.PolicyNames()
	cfg.Disagg.Policy = decider.Policy(policies[rng.IntN(len(policies))])
	cfg.Disagg.EffISLThreshold = rng.Int64N(4000)
	cfg.Disagg.EffISLRatioThreshold = rng.Float64()
	cfg.Disagg.PrefillBusyThreshold = decider.Some(rng.Float64() * 2)
	if rng.IntN(2) == 0 {
		cfg.Disagg.DecodeBusyThreshold = decider.Some(rng.Float64())
	}
	cfg.Disagg.DecodeBusySource = []decider.BusySource{decider.BusySourceRouter, decider.BusySourceWorker, decider.BusySourceMax}[rng.IntN(3)]
	cfg.OverlapScoreCredit = rng.Float64() * 1.5
	cfg.PrefillLoadScale = rng.Float64() * 2
	if rng.IntN(3) == 0 {
		cfg.Temperature = rng.Float64()
	}
	return cfg
}
