package api

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/decider/memview"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/testsize"
)

// TestDecisionRecordSizeProperty: on random fleets (up to 20k workers with
// the longest ids, several block sizes down to 1, cached prefixes) and
// random prompts (up to --max-prompt-tokens) with the longest request id,
// model and a long lora name, the record the API writes under the default
// bounds is at most --decision-record-max-bytes and keeps both picks.
func TestDecisionRecordSizeProperty(t *testing.T) {
	// Long and self-contained: it runs at the same time as the
	// package's other long tests.
	t.Parallel()
	rng := rand.New(rand.NewPCG(23, 29))
	s := &Server{cfg: defaultConfig(), deps: Deps{Names: events.Names{Prefix: "p."}}}
	cfg := decider.DefaultConfig()
	cfg.ConditionalDisagg, cfg.KVEvents = true, true
	dc, err := decider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	model := strings.Repeat("m", 512)
	for i := range testsize.Cases(9, 2) {
		// Even cases: a huge fleet and a short prompt; odd ones: a small
		// fleet and a long prompt, of --max-prompt-tokens every other
		// time; the last: both at once.
		v := memview.New()
		nDecode, nPrefill := 1+rng.IntN(20000), rng.IntN(300)
		prompt := 1 + rng.IntN(8192)
		if i%2 == 1 {
			nDecode, nPrefill = 1+rng.IntN(4), rng.IntN(3)
			prompt = 1 + rng.IntN(1<<21)
		}
		if i%4 == 1 || i == 8 {
			prompt = 1 << 21
		}
		sizes := []int{1, 16, 64}[:1+rng.IntN(3)]
		for j := range nDecode + nPrefill {
			pool := decider.PoolDecode
			if j >= nDecode {
				pool = decider.PoolPrefill
			}
			id := fmt.Sprintf("%s-%06d-", pool, j)
			id += strings.Repeat("w", events.MaxWorkerIDLen-len(id))
			v.Add(decider.WorkerInfo{ID: id, Pool: pool, Model: model, BlockSize: sizes[rng.IntN(len(sizes))],
				TotalKVBlocks: 1 << 20, MaxNumBatchedTokens: 8192})
		}
		toks := make([]uint32, prompt)
		for j := range toks {
			toks[j] = rng.Uint32()
		}
		p := &parsed{id: strings.Repeat("r", maxRequestIDLen), model: model, tokens: toks, prompt: int64(prompt)}
		req := &decider.Request{ID: p.id, Model: model, PromptTokens: p.prompt, Chains: chains(v.Workers(), model, p)}
		// The first worker of each size holds a long cached prefix.
		for _, c := range req.Chains {
			for _, w := range v.Workers() {
				if w.BlockSize == c.BlockSize {
					v.Store(w.ID, memview.Device, c.Hashes[:len(c.Hashes)/2]...)
					break
				}
			}
		}
		d, err := dc.Decide(v, req)
		if err != nil {
			t.Fatal(err)
		}
		rec := decisionRecord(d, req, s.cfg.budget.maxCandidates)
		rec.DecisionId, rec.ReplicaId, rec.LoraName = strings.Repeat("d", 26), strings.Repeat("h", 253), strings.Repeat("l", 1024)
		rec.ConfigJson = string(cfg.CanonicalJSON())
		rec.Watermark = &pb.Watermark{Topics: []*pb.TopicOffsets{{Topic: "kv-events", Partitions: []*pb.PartitionOffset{{Partition: 0, Offset: 1 << 40}}}}}
		r, err := s.decisionLogRecord(rec)
		if err != nil {
			t.Fatalf("case %d (%d+%d workers, %d tokens): %v", i, nDecode, nPrefill, prompt, err)
		}
		if len(r.Value) > s.cfg.budget.maxBytes {
			t.Fatalf("case %d: record of %d bytes, budget %d", i, len(r.Value), s.cfg.budget.maxBytes)
		}
		picked := 0
		for _, c := range rec.GetCandidates() {
			if c.GetPicked() {
				picked++
			}
		}
		if want := min(2, 1+min(nPrefill, 1)); picked != want || len(rec.GetCandidates()) > s.cfg.budget.maxCandidates {
			t.Fatalf("case %d: %d rows, %d picked (want %d)", i, len(rec.GetCandidates()), picked, want)
		}
	}
}
