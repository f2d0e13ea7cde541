package events

import (
	"math/rand/v2"
	"slices"
	"testing"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
	"github.com/pdrouter/pdrouter/internal/testsize"
)

// TestFitDecisionChainsProperty: on random records with long chains and
// random budgets, a record FitDecisionChains says fits encodes within the
// budget; each chain keeps a prefix of its hashes and counts the rest; the
// decode worker's chain is cut only when one more block would not fit; and
// a record it says does not fit keeps no hash at all.
func TestFitDecisionChainsProperty(t *testing.T) {
	// Long and self-contained: it runs at the same time as the
	// package's other long tests.
	t.Parallel()
	rng := rand.New(rand.NewPCG(17, 19))
	for i := range testsize.Cases(3000, 300) {
		d := randomDecision(rng)
		if rng.IntN(2) == 0 {
			d = eventstest.Decision(1+rng.IntN(200), rng.IntN(40), 0)
		}
		for _, c := range d.Chains {
			c.BlockHashes = c.BlockHashes[:0]
			for range rng.IntN(20000) {
				c.BlockHashes = append(c.BlockHashes, rng.Uint64())
			}
			c.OmittedBlocks = uint32(rng.IntN(2) * rng.IntN(1000))
		}
		if len(d.Chains) > 0 && rng.IntN(2) == 0 {
			d.BlockSize = d.Chains[rng.IntN(len(d.Chains))].BlockSize
		}
		before := make([]*pb.HashChain, len(d.Chains))
		for j, c := range d.Chains {
			before[j] = &pb.HashChain{BlockSize: c.BlockSize, BlockHashes: c.BlockHashes, OmittedBlocks: c.OmittedBlocks}
		}
		whole, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		budget := 1 + rng.IntN(len(whole)+1000)
		fits := FitDecisionChains(d, len(whole), budget)
		got, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if fits != (len(got) <= budget) {
			t.Fatalf("record %d: FitDecisionChains says fits=%v, but it encodes in %d bytes for a budget of %d", i, fits, len(got), budget)
		}
		if len(d.Chains) != len(before) {
			t.Fatalf("record %d: %d chains became %d", i, len(before), len(d.Chains))
		}
		for j, c := range d.Chains {
			b := before[j]
			if c.BlockSize != b.BlockSize || !slices.Equal(c.BlockHashes, b.BlockHashes[:len(c.BlockHashes)]) ||
				uint64(len(c.BlockHashes))+uint64(c.OmittedBlocks) != uint64(len(b.BlockHashes))+uint64(b.OmittedBlocks) {
				t.Fatalf("record %d chain %d: not a prefix that counts the rest: %d+%d of %d+%d", i, j,
					len(c.BlockHashes), c.OmittedBlocks, len(b.BlockHashes), b.OmittedBlocks)
			}
			if !fits && len(c.BlockHashes) > 0 {
				t.Fatalf("record %d: over budget but chain %d keeps %d hashes", i, j, len(c.BlockHashes))
			}
		}
		// The decode chain is as long as the budget allows.
		for j, c := range d.Chains {
			if !fits || c.BlockSize != d.BlockSize || len(c.BlockHashes) == len(before[j].BlockHashes) {
				continue
			}
			c.BlockHashes = before[j].BlockHashes[:len(c.BlockHashes)+1]
			c.OmittedBlocks--
			if longer, _ := Marshal(d); len(longer) <= budget {
				t.Fatalf("record %d: the decode chain was cut to %d blocks, but %d fit", i, len(c.BlockHashes)-1, len(c.BlockHashes))
			}
			break
		}
	}
}

// FuzzFitDecisionChains: whatever the record and budget, the result is
// within the budget whenever FitDecisionChains says so, and it never panics.
func FuzzFitDecisionChains(f *testing.F) {
	f.Add(uint64(1), uint16(4096), uint16(3000))
	f.Add(uint64(7), uint16(100), uint16(0))
	f.Fuzz(func(t *testing.T, seed uint64, budget, blocks uint16) {
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		d := randomDecision(rng)
		d.Chains = append(d.Chains, &pb.HashChain{BlockSize: 1, BlockHashes: make([]uint64, blocks)})
		whole, err := Marshal(d)
		if err != nil {
			t.Skipf("the random record does not encode (%v): there is nothing to fit", err)
		}
		if FitDecisionChains(d, len(whole), int(budget)) {
			if got, _ := Marshal(d); len(got) > int(budget) {
				t.Fatalf("fits, but %d bytes for a budget of %d", len(got), budget)
			}
		}
	})
}
