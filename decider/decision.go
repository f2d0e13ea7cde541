package decider

// Mode says where the prompt is prefilled.
type Mode string

const (
	// ModeLocal prefills on the decode worker (the bypass).
	ModeLocal Mode = "local"
	// ModeRemote prefills on a prefill worker and moves the KV cache to the decode worker.
	ModeRemote Mode = "remote"
)

// Reason is the reason code of conditional-disagg.md. It is returned to the caller,
// recorded in the decision and used as a metric label, so the strings are fixed.
type Reason string

const (
	ReasonDeclinedByPolicy        Reason = "bypass_declined_by_policy"
	ReasonAllowedGateDisabled     Reason = "bypass_allowed_decode_gate_disabled"
	ReasonAllowedDecodeNotBusy    Reason = "bypass_allowed_decode_not_busy"
	ReasonDeniedDecodeBusy        Reason = "bypass_denied_decode_busy"
	ReasonDeniedDecodeBusyUnknown Reason = "bypass_denied_decode_busy_unknown"
	ReasonAggregatedNoPrefill     Reason = "aggregated_no_prefill_workers"
	// The slo policy's codes (docs/slo-policy.md).
	ReasonSLOColdLocal      Reason = "slo_cold_start_local"
	ReasonSLOColdRemote     Reason = "slo_cold_start_remote"
	ReasonSLOLocalBetter    Reason = "slo_local_predicted_better"
	ReasonSLORemoteBetter   Reason = "slo_remote_predicted_better"
	ReasonSLODeniedITLGuard Reason = "slo_local_denied_itl_guard"
	// ReasonSLODeniedQueueCap: remote, though the model predicted local better,
	// because in a fleet that prefills remotely nearly always the decode worker's
	// local prefill queue would pass the queue cap.
	ReasonSLODeniedQueueCap Reason = "slo_local_denied_queue_cap"
	// ReasonSLOPrefillGuard: local, though the model predicted remote better, because
	// every prefill worker is busy past the prefill busy threshold and the decode
	// worker is not (the prefill guard).
	ReasonSLOPrefillGuard Reason = "slo_local_prefill_guard"
	ReasonDisabled        Reason = "conditional_disagg_disabled"
)

// CheckName names the rule that decided, for explain and what-if tooling.
type CheckName string

const (
	// CheckFeatureOff: conditional disaggregation is off.
	CheckFeatureOff CheckName = "conditional_disagg"
	// CheckPrefillPool: no eligible prefill worker.
	CheckPrefillPool CheckName = "prefill_pool"
	// CheckEmptyPrompt: P == 0, which always satisfies the ISL condition.
	CheckEmptyPrompt CheckName = "prompt_tokens_zero"
	// CheckEffISL: eff < eff_isl_threshold.
	CheckEffISL CheckName = "eff_isl_threshold"
	// CheckRatio: ratio < eff_isl_ratio_threshold.
	CheckRatio CheckName = "eff_isl_ratio_threshold"
	// CheckPrefillBusy: active_prefill_tokens(p) > prefill_busy_threshold × max_num_batched_tokens(p).
	CheckPrefillBusy CheckName = "prefill_busy_threshold"
	// CheckDecodeBusy: decode_busy(d) > decode_busy_threshold × total_kv_blocks(d).
	CheckDecodeBusy CheckName = "decode_busy_threshold"
	// CheckPolicyRule: the policy's rule compares no threshold; it settled the mode by
	// itself (Distance is then 0).
	CheckPolicyRule CheckName = "policy_rule"
	// CheckSLOGoodput: the slo policy's expected goodput of local minus remote
	// (Distance is that margin).
	CheckSLOGoodput CheckName = "slo_goodput"
	// CheckSLOITLGuard: the predicted ITL of the decode worker's running requests after
	// a local prefill, against slo_itl_ms (Distance is value − limit).
	CheckSLOITLGuard CheckName = "slo_itl_guard"
	// CheckSLOQueueCap: the prefill time of the decode worker's queued prompt tokens and
	// this prompt's, against SLOQueueCapFraction × slo_ttft_ms (Distance is value −
	// limit, in ms).
	CheckSLOQueueCap CheckName = "slo_queue_cap"
)

// Notes explain a Check whose inputs were missing or substituted. They are constants so
// that recording them never allocates.
const (
	NoteNoLoadSample          = "no_load_sample"
	NoteMaxBatchedUnknown     = "max_num_batched_tokens_unknown_taken_as_10000000"
	NoteTotalKVBlocksUnknown  = "total_kv_blocks_unknown"
	NoteWorkerSampleMissing   = "worker_load_sample_missing"
	NoteMaxUsedRouterOnly     = "worker_load_sample_missing_used_router"
	NoteEmptyPrompt           = "prompt_tokens_zero"
	NoteNoPrefillWorkerPicked = "no_prefill_worker"
)

// Check is one comparison of the policy or the guard, with both sides, so a reader can
// see how far the value was from the boundary. For the ISL checks Hit means
// Value < Limit (bypass allowed by that check); for the busy checks Hit means
// Value > Limit (busy).
type Check struct {
	Name CheckName `json:"name"`
	// Evaluated is false when the config did not call for this check.
	Evaluated bool `json:"evaluated"`
	// Known is false when an input was missing and the spec's rule for the missing
	// input decided instead (see Note).
	Known bool    `json:"known"`
	Value float64 `json:"value"`
	Limit float64 `json:"limit"`
	Hit   bool    `json:"hit"`
	Note  string  `json:"note"`
}

// Hash64 is a 64-bit hash, encoded in JSON as 16 hex digits.
type Hash64 uint64

// Candidate is one row of the candidate table: every input and cost term for one worker
// of the request's model in one pool. Decode rows come first, then prefill rows, each in
// worker id order.
type Candidate struct {
	Worker WorkerID `json:"worker"`
	Pool   Pool     `json:"pool"`
	// Eligible is false for a worker excluded by a filter (Excluded says which); its cost
	// terms are then zero.
	Eligible  bool   `json:"eligible"`
	Excluded  string `json:"excluded"`
	BlockSize int    `json:"block_size"`
	// OverlapBlocks, HostBlocks, DiskBlocks are overlap(w), host(w), disk(w).
	OverlapBlocks int `json:"overlap_blocks"`
	HostBlocks    int `json:"host_blocks"`
	DiskBlocks    int `json:"disk_blocks"`
	// ActivePrefillTokens is the router-side active_prefill_tokens(w) the cost reads.
	ActivePrefillTokens int64 `json:"active_prefill_tokens"`
	// RawPrefillBlocks = (active_prefill_tokens + P) / B.
	RawPrefillBlocks float64 `json:"raw_prefill_blocks"`
	// OverlapCredit = overlap_score_credit·overlap + 0.75·host + 0.25·disk.
	OverlapCredit float64 `json:"overlap_credit"`
	// PrefillTerm = prefill_load_scale · max(0, RawPrefillBlocks − OverlapCredit).
	PrefillTerm float64 `json:"prefill_term"`
	// Decode rows only: PotentialDecodeBlocks = ActiveDecodeBlocks + RequestBlocks −
	// SharedActiveBlocks, the decode term of the cost.
	ActiveDecodeBlocks    int64 `json:"active_decode_blocks"`
	RequestBlocks         int64 `json:"request_blocks"`
	SharedActiveBlocks    int64 `json:"shared_active_blocks"`
	PotentialDecodeBlocks int64 `json:"potential_decode_blocks"`
	// Cost = B · (PrefillTerm (+ PotentialDecodeBlocks for decode rows)), in tokens so
	// that workers of different block sizes compare (decider version 1 left out the B).
	// Under the slo policy from decider version 13, behind a deep prefill backlog, a
	// decode row with a load sample counts ActiveDecodeBlocks at most at
	// LoadKVUsedBlocks in that term. Lowest wins.
	Cost float64 `json:"cost"`
	// TieHash = hash(request id, worker id); the lowest breaks an exact cost tie.
	TieHash Hash64 `json:"tie_hash"`
	// Probability is the softmax probability when temperature > 0, else 0.
	Probability         float64 `json:"probability"`
	TotalKVBlocks       int64   `json:"total_kv_blocks"`
	MaxNumBatchedTokens int64   `json:"max_num_batched_tokens"`
	// LoadKnown says whether a load sample exists; the two load fields are its values.
	LoadKnown         bool  `json:"load_known"`
	LoadKVUsedBlocks  int64 `json:"load_kv_used_blocks"`
	LoadPrefillTokens int64 `json:"load_prefill_tokens"`
	// ActiveRequests is the router-side count of requests in flight on the worker (a
	// feature of the latency model; encoded only when not zero).
	ActiveRequests int64 `json:"active_requests,omitempty"`
	// RecentLocalPrefill is ActiveLoad.RecentLocalPrefill (decode rows; encoded only
	// when not zero).
	RecentLocalPrefill int64 `json:"recent_local_prefill,omitempty"`
	// RecentRequests is ActiveLoad.RecentRequests (encoded only when not zero).
	RecentRequests int64 `json:"recent_requests,omitempty"`
	// Picked marks the worker selection chose in this pool. A picked prefill row in a
	// local decision is the worker the load policy asked about.
	Picked bool `json:"picked"`
}

// Decision is the output: what to do, why, and everything needed to recompute it.
//
// A Decision owns scratch space that DecideInto reuses, so keep one per goroutine and
// pass it back in to decide without allocating. Copying a Decision shares its slices.
type Decision struct {
	RequestID string `json:"request_id"`
	Model     string `json:"model"`
	Mode      Mode   `json:"mode"`
	Reason    Reason `json:"reason"`
	Policy    Policy `json:"policy"`
	// ConfigHash is Config.Hash() of the config that decided.
	ConfigHash   string   `json:"config_hash"`
	DecodeWorker WorkerID `json:"decode_worker"`
	// PrefillWorker is set only when Mode is remote.
	PrefillWorker WorkerID `json:"prefill_worker"`
	PromptTokens  int64    `json:"prompt_tokens"`
	// BlockSize is the decode worker's block size, the B of the credit.
	BlockSize int `json:"block_size"`
	// CachedTokens is the credit C on the decode worker.
	CachedTokens int64 `json:"cached_tokens"`
	// EffectiveISL = P − min(C, P).
	EffectiveISL int64 `json:"effective_isl"`
	// Ratio = eff / max(P, 1).
	Ratio float64 `json:"effective_isl_ratio"`
	// PolicyBypass is what the policy said before the decode guard.
	PolicyBypass bool `json:"policy_bypass"`
	// DecidedBy names the rule or threshold that settled the mode, and Distance is that
	// check's Value − Limit: how far, in its own unit, the decision was from flipping.
	DecidedBy   CheckName `json:"decided_by"`
	Distance    float64   `json:"distance"`
	EffISLCheck Check     `json:"eff_isl_check"`
	RatioCheck  Check     `json:"ratio_check"`
	PrefillBusy Check     `json:"prefill_busy_check"`
	DecodeBusy  Check     `json:"decode_busy_check"`
	// SLO holds the slo policy's predictions; it is evaluated only under that policy
	// (and encoded only then, so other policies' records keep their bytes).
	SLO SLOPrediction `json:"slo,omitzero"`
	// Candidates is the full candidate table: the model's decode workers, then its
	// prefill workers, each group in worker id order.
	Candidates []Candidate `json:"candidates"`

	scratch scratch
}

// scratch is per-decision working memory, kept across DecideInto calls.
type scratch struct {
	order   []int32 // worker refs of this model, decode first, sorted by id
	overlap []TierOverlap
	shared  []int
	sizes   []int
	fit     *LatencyFit // the view's latency model, for the slo policy
}

// SLOPrediction is what the slo policy predicted and compared (docs/slo-policy.md).
// Times are in ms; goodputs are expected fractions of requests meeting both SLOs.
type SLOPrediction struct {
	Evaluated bool `json:"evaluated"`
	// Warm is false while the model has fewer than slo_min_samples samples on some
	// path and target: the policy then fell back to isl_or_load.
	Warm bool `json:"warm"`
	// Samples is the least sample count over paths and targets.
	Samples      int64   `json:"samples"`
	TTFTLimitMs  float64 `json:"slo_ttft_ms"`
	ITLLimitMs   float64 `json:"slo_itl_ms"`
	LocalTTFTMs  float64 `json:"local_ttft_ms"`
	LocalITLMs   float64 `json:"local_itl_ms"`
	RemoteTTFTMs float64 `json:"remote_ttft_ms"`
	RemoteITLMs  float64 `json:"remote_itl_ms"`
	// RunningRequests are the decode worker's requests in flight; OthersITLMs is their
	// predicted ITL if this prompt is prefilled there, OthersBaseITLMs if it is not.
	RunningRequests int64   `json:"running_requests"`
	OthersITLMs     float64 `json:"others_itl_ms"`
	OthersBaseITLMs float64 `json:"others_base_itl_ms"`
	// NextTTFTMs and NextITLMs are the predicted remote TTFT and ITL of the next
	// request like this one on the decode worker if this prompt is prefilled there:
	// a local prefill is charged their lost goodput.
	NextTTFTMs float64 `json:"next_ttft_ms"`
	NextITLMs  float64 `json:"next_itl_ms"`
	// RemoteDecodeTTFTMs is the part of RemoteTTFTMs the decode worker's features
	// explain: when both paths miss, local needs it to be at most half.
	RemoteDecodeTTFTMs float64 `json:"remote_decode_ttft_ms"`
	LocalGoodput       float64 `json:"local_goodput"`
	RemoteGoodput      float64 `json:"remote_goodput"`
	// LocalDelayCharge and RemoteDelayCharge are the goodput each path's prefill is
	// expected to cost the requests that queue behind it on the worker it occupies
	// (the decode worker, the prefill worker), judged on a request of TypicalTTFTMs,
	// the remote path's mean TTFT over the model's window. LocalGoodput already has
	// the local charge taken off.
	LocalDelayCharge  float64 `json:"local_delay_charge"`
	RemoteDelayCharge float64 `json:"remote_delay_charge"`
	TypicalTTFTMs     float64 `json:"typical_ttft_ms"`
	// Margin is LocalGoodput − (RemoteGoodput − RemoteDelayCharge): local wins above
	// SLOTieMargin.
	Margin float64 `json:"margin"`
	// Fit is the model the predictions came from, so that a recompute from the record
	// predicts the same.
	Fit LatencyFit `json:"-"`
}
