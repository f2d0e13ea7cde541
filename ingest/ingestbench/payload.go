package ingestbench

import "github.com/pdrouter/pdrouter/sim"

// payloadCount is how many distinct payloads a publisher cycles through:
// enough that ingest does not see one message over and over, few enough to
// build in a moment. Publisher and checker build the same ones.
const payloadCount = 64

// blockSize is the tokens per block of every generated event.
const blockSize = 16

// Payloads returns the engine batches of a run with k one-block
// BlockStored events per message, encoded as vLLM ≥ v0.24 puts them on the
// wire (sim.EncodeBatch, map-encoded events), so ingest decodes what an
// engine really sends. Payload p holds the blocks p*k+1 .. p*k+k.
func Payloads(k int) [][]byte {
	out := make([][]byte, payloadCount)
	for p := range out {
		evs := make([]sim.KVEvent, k)
		for i := range evs {
			first := uint32((p*k + i) * blockSize)
			toks := make([]uint32, blockSize)
			for j := range toks {
				toks[j] = first + uint32(j)
			}
			evs[i] = sim.KVEvent{Kind: sim.BlockStored, Hashes: []uint64{uint64(p*k + i + 1)}, Tokens: toks, BlockSize: blockSize}
		}
		out[p] = sim.EncodeBatch(1757500000.25, evs, 0, sim.WireMap)
	}
	return out
}
