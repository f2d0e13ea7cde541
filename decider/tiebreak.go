package decider

import "github.com/zeebo/xxh3"

// Seeds of the request-id hashes. Each use has its own seed so that the tie-break of one
// pool and the sampling of another are independent draws. They are part of the
// determinism contract: changing one changes recorded decisions on replay.
const (
	seedTieBreak    = 0x7064722d74696531 // "pdr-tie1"
	seedDecodePCG1  = 0x7064722d64656331 // "pdr-dec1"
	seedDecodePCG2  = 0x7064722d64656332 // "pdr-dec2"
	seedPrefillPCG1 = 0x7064722d70726531 // "pdr-pre1"
	seedPrefillPCG2 = 0x7064722d70726532 // "pdr-pre2"
)

// requestKey hashes the request id once per decision; tieHash derives each worker's key.
func requestKey(requestID string) uint64 { return xxh3.HashStringSeed(requestID, seedTieBreak) }

// tieHash is the stable tie-break key of a worker for a request:
//
//	XXH3-64(worker id bytes, seed = XXH3-64(request id bytes, seed 0x7064722d74696531))
//
// Dynamo breaks cost ties at random; a replayable router cannot. Hashing with the request
// id, rather than taking the lowest worker id, spreads tied requests evenly over the tied
// workers while giving every replica and every replay the same answer.
func tieHash(reqKey uint64, worker WorkerID) uint64 { return xxh3.HashStringSeed(worker, reqKey) }

// hashSeed derives one PCG seed word from the request id.
func hashSeed(requestID string, seed uint64) uint64 { return xxh3.HashStringSeed(requestID, seed) }
