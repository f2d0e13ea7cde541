package replay

import (
	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// RecordView is the decider.View a record's candidate table describes: the
// state exactly as the deciding replica presented it to the decider, row by
// row. It is how a decision is recomputed from its record alone.
//
// Each row gives back what the decider asked the real view for that worker:
// the registry entry (pool, block size, capacities, availability), the load
// sample, the router-side active load, and the answers of MatchPrefix and
// MatchActive. The hash chains are not consulted: the recorded overlaps are
// the answers the real index gave for this very request, so answering them
// again by worker is what makes the recompute independent of the state.
//
// Rows excluded as "unavailable" come back unavailable; rows excluded for
// an unknown block size come back with block size 0. Only the request's
// model is present, since the decider never looks at other models' workers.
type RecordView struct {
	workers []decider.WorkerInfo
	rows    []*pb.Candidate
	fit     *decider.LatencyFit
}

var _ decider.View = (*RecordView)(nil)

// NewRecordView builds the view of a record's candidate table.
func NewRecordView(rec *pb.DecisionRecord) *RecordView {
	v := &RecordView{rows: rec.GetCandidates(), workers: make([]decider.WorkerInfo, len(rec.GetCandidates()))}
	if f := fitOf(rec.GetSlo().GetFit()); f != (decider.LatencyFit{}) {
		v.fit = &f
	}
	for i, c := range v.rows {
		v.workers[i] = decider.WorkerInfo{
			ID: workerID(c.GetWorker()), Pool: poolOf(c.GetPool()), Model: rec.GetModel(),
			BlockSize: int(c.GetBlockSize()), TotalKVBlocks: c.GetTotalKvBlocks(),
			MaxNumBatchedTokens: c.GetMaxNumBatchedTokens(),
			Unavailable:         c.GetExcluded() == decider.ExcludedUnavailable,
			Unhealthy:           c.GetExcluded() == decider.ExcludedUnhealthy,
		}
	}
	return v
}

// Workers implements decider.Registry.
func (v *RecordView) Workers() []decider.WorkerInfo { return v.workers }

// MatchPrefix implements decider.PrefixIndex from the recorded overlaps.
func (v *RecordView) MatchPrefix(blockSize int, _ []uint64, dst []decider.TierOverlap) {
	for i, c := range v.rows {
		if v.workers[i].BlockSize == blockSize {
			dst[i] = decider.TierOverlap{Device: int(c.GetOverlapBlocks()), Host: int(c.GetHostBlocks()), Disk: int(c.GetDiskBlocks())}
		}
	}
}

// Load implements decider.LoadSource from the recorded sample.
func (v *RecordView) Load(ref decider.WorkerRef) (decider.LoadSample, bool) {
	c := v.rows[ref]
	if !c.GetLoadKnown() {
		return decider.LoadSample{}, false
	}
	return decider.LoadSample{KVUsedBlocks: c.GetLoadKvUsedBlocks(), ActivePrefillTokens: c.GetLoadPrefillTokens()}, true
}

// Active implements decider.ActiveAccounting from the recorded active load.
func (v *RecordView) Active(ref decider.WorkerRef) decider.ActiveLoad {
	c := v.rows[ref]
	return decider.ActiveLoad{DecodeBlocks: c.GetActiveDecodeBlocks(), PrefillTokens: c.GetActivePrefillTokens(),
		Requests: c.GetActiveRequests(), RecentLocalPrefill: c.GetRecentLocalPrefill(), RecentRequests: c.GetRecentRequests()}
}

// MatchActive implements decider.ActiveAccounting from the recorded shared
// active blocks.
func (v *RecordView) MatchActive(blockSize int, _ []uint64, dst []int) {
	for i, c := range v.rows {
		if v.workers[i].BlockSize == blockSize {
			dst[i] = int(c.GetSharedActiveBlocks())
		}
	}
}
