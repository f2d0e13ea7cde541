package decider

import "time"

// WorkerID names one routable engine instance. When an engine runs several data-parallel
// ranks, the state layer folds the rank into the id, so the decider never needs to know.
type WorkerID = string

// WorkerRef is a dense handle for a worker inside one View: the index of the worker in
// View.Workers(). Per-worker questions take a WorkerRef instead of a WorkerID so that a
// view answers them with a slice index rather than a string-keyed map lookup; that is
// what keeps a 160-worker decision within its latency budget. A WorkerRef is only
// meaningful for the view that produced it.
type WorkerRef = int

// Pool is the pool a worker registered in. Conditional disaggregation needs both pools.
type Pool string

const (
	// PoolDecode holds workers that generate tokens; they can also prefill locally.
	PoolDecode Pool = "decode"
	// PoolPrefill holds workers that only turn prompts into KV caches for a decode worker.
	PoolPrefill Pool = "prefill"
)

// WorkerInfo is one registry entry, as the state reduced it from the workers topic.
//
// A capacity of zero or less means "unknown". A registration that leaves a field out
// decodes to zero, and no real engine has zero KV blocks or a zero token budget, so the
// zero value is the honest encoding of "nobody told us". The spec gives each unknown its
// own rule: an unknown TotalKVBlocks makes decode_busy unknown (bypass denied), an
// unknown MaxNumBatchedTokens is taken as 10,000,000.
type WorkerInfo struct {
	ID    WorkerID
	Pool  Pool
	Model string
	// BlockSize is tokens per KV block. A worker with no known block size cannot be
	// costed (the cost divides by it), so it is never eligible.
	BlockSize int
	// TotalKVBlocks is the worker's KV capacity in blocks; ≤ 0 means unknown. The state
	// may fill it from the registration or from the latest load sample.
	TotalKVBlocks int64
	// MaxNumBatchedTokens is the engine's per-step token budget; ≤ 0 means unknown.
	MaxNumBatchedTokens int64
	// Unavailable marks a worker that must receive no new request: it is draining, it
	// failed a health check, or a busy filter excluded it. This is the only busy filter
	// the decider applies. The load tests of the policies are not filters: if they removed
	// workers, prefill_load could never see the busy worker it is asking about.
	Unavailable bool
	// Unhealthy marks a worker whose latest health record on the log says it stopped
	// answering (a failed scrape, a refused connection). It is log state: every replica
	// that applied the same records sees the same flag, so the candidate table records
	// it as its own reason (ExcludedUnhealthy) and a recompute reproduces it.
	Unhealthy bool
}

// LoadSample is the latest load a worker reported itself (the load topic). It can be
// missing; each rule that reads it says what a missing sample means.
type LoadSample struct {
	// KVUsedBlocks is what decode_busy_source=worker reads.
	KVUsedBlocks int64
	// ActivePrefillTokens is what the prefill_load policy compares with
	// prefill_busy_threshold × max_num_batched_tokens.
	ActivePrefillTokens int64
}

// ActiveLoad is the router-side accounting for one worker, event-sourced from the
// decisions and outcomes topics so that every replica agrees on it.
type ActiveLoad struct {
	// DecodeBlocks is the number of distinct KV blocks of active requests on the worker.
	DecodeBlocks int64
	// PrefillTokens is the number of prompt tokens the worker still has to prefill.
	PrefillTokens int64
	// Requests is the number of requests in flight on the worker as decode worker: a
	// feature of the latency model (docs/slo-policy.md).
	Requests int64
	// RecentLocalPrefill is the prompt tokens of the local prefills decided onto the
	// worker in the last RecentLocalWindow of event time: the rate at which prefills
	// take its steps from its decoding requests, a feature of the latency model.
	RecentLocalPrefill int64
	// RecentRequests is the requests decided onto the worker in the last
	// RecentLocalWindow of event time: as their decode worker, or as the prefill worker
	// of a remote prefill. Over the window it is the rate at which requests arrive at
	// the worker, which the slo policy's delay charges read.
	RecentRequests int64
}

// RecentLocalWindow is the event-time window of ActiveLoad.RecentLocalPrefill.
const RecentLocalWindow = 30 * time.Second

// TierOverlap says how many leading complete blocks of a request's chain a worker holds,
// split by cache tier (the `medium` of the KV events). Device counts first; Host and Disk
// count the further leading blocks that the worker can only bring back from a lower
// tier. The decider credits them 1·overlap_score_credit, 0.75 and 0.25 respectively.
type TierOverlap struct {
	Device int
	Host   int
	Disk   int
}

// Total is the length of the leading run held in any tier.
func (o TierOverlap) Total() int { return o.Device + o.Host + o.Disk }
