package statestore

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkActiveIndexChain: adding and removing one 1,024-block chain on
// an index already holding 8,192 such chains, ~8M (block, slot) pairs
// (steady state: no growth).
func BenchmarkActiveIndexChain(b *testing.B) {
	var x activeIndex
	rng := rand.New(rand.NewPCG(1, 2))
	chains := make([][]uint64, 8192)
	for i := range chains {
		c := make([]uint64, 1024)
		for j := range c {
			c[j] = rng.Uint64()
		}
		chains[i] = c
		x.addChain(c, int32(i%128))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := chains[i%len(chains)]
		x.removeChain(c, int32(i%len(chains)%128))
		x.addChain(c, int32(i%len(chains)%128))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2048, "ns/block")
}
