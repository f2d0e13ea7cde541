package events

import "strconv"

// WorkerKey is the record key of every per-worker topic. All records about
// one worker share a key, so Kafka's key hashing puts them in one partition,
// where they are totally ordered (design.md, Topics).
//
// Data-parallel ranks of a worker share the key on purpose: the ranks of one
// engine restart together, and a source reset must be ordered with the blocks
// it invalidates.
func WorkerKey(workerID string) []byte { return []byte(workerID) }

// WorkerRank renders a worker and rank for humans and metrics labels:
// "decode-1" for rank 0 and "decode-1/dp3" otherwise.
func WorkerRank(workerID string, dpRank uint32) string {
	if dpRank == 0 {
		return workerID
	}
	return workerID + "/dp" + strconv.FormatUint(uint64(dpRank), 10)
}
