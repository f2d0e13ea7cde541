package events

import (
	"strconv"
	"strings"
)

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

// ParseWorkerRank inverts WorkerRank. Worker ids never contain '/'
// (ValidateWorkerID), so the split is unambiguous.
func ParseWorkerRank(s string) (workerID string, dpRank uint32, ok bool) {
	id, rank, found := strings.Cut(s, "/dp")
	if !found {
		return s, 0, !strings.Contains(s, "/")
	}
	n, err := strconv.ParseUint(rank, 10, 32)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != rank || strings.Contains(id, "/") {
		return "", 0, false
	}
	return id, uint32(n), true
}
