package decider

import "math"

// LatencyModel serves the fitted online latency model the slo policy predicts with
// (docs/slo-policy.md). The state learns it from the outcomes topic joined with each
// decision's features; the decider only reads the fit, so it stays a pure function of
// what the view presents.
type LatencyModel interface {
	// LatencyFit returns the current fit, or nil when there is none. The fit is
	// immutable and owned by the view; the decider copies what it uses.
	LatencyFit() *LatencyFit
}

// LatencyPath is the path a request takes: its prefill on the decode worker (local) or
// on a prefill worker (remote). The model is fitted per path.
type LatencyPath uint8

const (
	PathLocal  LatencyPath = 0
	PathRemote LatencyPath = 1
	// NumPaths is the number of paths.
	NumPaths = 2
)

// LatencyTarget is what the model predicts.
type LatencyTarget uint8

const (
	TargetTTFT LatencyTarget = 0 // time to first token, ms
	TargetITL  LatencyTarget = 1 // the request's mean inter-token latency, ms
	// NumTargets is the number of targets.
	NumTargets = 2
)

// LatencyK is the length of the feature vector (LatencyInputs.Vector).
const LatencyK = 10

// MaxLatencyFeature bounds every feature: a larger input is clamped to it, so that the
// model's integer sums cannot overflow whatever a record claims (docs/slo-policy.md).
const MaxLatencyFeature = 1 << 20

// LatencyInputs are the features of one request on one path, from the candidate rows
// the decider reads and the state records. All are counts (tokens, blocks, requests).
type LatencyInputs struct {
	// Uncached is the prompt tokens the prefilling worker must compute.
	Uncached int64
	// Tier is the prompt tokens the prefilling worker holds only in a host or disk
	// tier (loaded, not computed): the tier mix.
	Tier int64
	// Queued is the prompt tokens already queued on the prefilling worker (router
	// accounting).
	Queued int64
	// DecodeRequests and DecodeBlocks are the decode worker's active requests and
	// blocks before this one.
	DecodeRequests int64
	DecodeBlocks   int64
	// DecodePrefill is the prompt tokens queued on the decode worker (local prefills in
	// flight there), which stall its decode steps.
	DecodePrefill int64
	// Transfer is the prompt tokens whose KV cache moves to the decode worker (remote
	// only): the KV bytes to transfer, in tokens, since bytes per token is one constant
	// of the model served.
	Transfer int64
	// DecodeFill is the decode worker's KV cache in use, in per-mille of its blocks
	// (its load sample's used blocks, else the router's potential blocks; 0 when its
	// capacity is unknown): near 1000 a request waits for blocks to be admitted.
	DecodeFill int64
	// DecodeRecentLocal is the prompt tokens prefilled locally on the decode worker in
	// the last RecentLocalWindow: how much of its time prefills have been taking from
	// the requests it decodes, which a snapshot of its queue does not show.
	DecodeRecentLocal int64
}

// Vector writes the feature vector: 1, then each input clamped to [0, MaxLatencyFeature].
func (in *LatencyInputs) Vector(x *[LatencyK]int64) {
	x[0] = 1
	x[1] = clampFeature(in.Uncached)
	x[2] = clampFeature(in.Tier)
	x[3] = clampFeature(in.Queued)
	x[4] = clampFeature(in.DecodeRequests)
	x[5] = clampFeature(in.DecodeBlocks)
	x[6] = clampFeature(in.DecodePrefill)
	x[7] = clampFeature(in.Transfer)
	x[8] = clampFeature(in.DecodeFill)
	x[9] = clampFeature(in.DecodeRecentLocal)
}

func clampFeature(v int64) int64 { return min(max(v, 0), MaxLatencyFeature) }

// LatencyInputsOf is the inputs whose Vector is 1 then v: the inverse of
// Vector for features within their clamp, as records carry them.
func LatencyInputsOf(v *[LatencyK - 1]int64) LatencyInputs {
	return LatencyInputs{Uncached: v[0], Tier: v[1], Queued: v[2], DecodeRequests: v[3], DecodeBlocks: v[4],
		DecodePrefill: v[5], Transfer: v[6], DecodeFill: v[7], DecodeRecentLocal: v[8]}
}

// LatencyFit is a fitted model: per path and target, the coefficients of a linear
// predictor over the feature vector (ms), the residual standard deviation (ms) and the
// number of samples it was fitted on. A zero Samples means no fit.
//
// Why linear in the raw latency: a request waits behind the work queued ahead of it,
// so its TTFT grows linearly with the queue, and a linear model extrapolates that
// correctly beyond the queues it has seen (a log-linear one, tried, grows too fast or
// too slow there and chose worse in the simulator's grid).
type LatencyFit struct {
	Samples [NumPaths][NumTargets]int64
	Coef    [NumPaths][NumTargets][LatencyK]float64
	Sigma   [NumPaths][NumTargets]float64
	// Mean is the mean of the target over the samples (ms): the latency of the path's
	// typical request, which the slo policy's delay charges judge a delay on.
	Mean [NumPaths][NumTargets]float64
}

// Predict returns the predicted value (ms, never negative) of target on path for the
// inputs.
func (f *LatencyFit) Predict(path LatencyPath, target LatencyTarget, in *LatencyInputs) float64 {
	var x [LatencyK]int64
	in.Vector(&x)
	c := &f.Coef[path][target]
	s := 0.0
	for i := range x {
		s += float64(c[i] * float64(x[i]))
	}
	if !(s > 0) {
		return 0
	}
	return s
}

// DecodeSide returns the part of Predict's sum that the decode worker's features
// contribute (its active requests and blocks, prompt tokens queued on it, its KV fill
// and its recent local prefills): how much of the prediction the decode worker's
// congestion explains, as opposed to the prefilling worker's and the prompt's own.
func (f *LatencyFit) DecodeSide(path LatencyPath, target LatencyTarget, in *LatencyInputs) float64 {
	var x [LatencyK]int64
	in.Vector(&x)
	c := &f.Coef[path][target]
	// Features 4, 5, 6, 8 and 9 of Vector are the decode worker's.
	return c[4]*float64(x[4]) + c[5]*float64(x[5]) + c[6]*float64(x[6]) + c[8]*float64(x[8]) + c[9]*float64(x[9])
}

// Warm reports whether every path and target has at least min samples.
func (f *LatencyFit) Warm(min int64) bool {
	if f == nil {
		return false
	}
	for p := range f.Samples {
		for t := range f.Samples[p] {
			if f.Samples[p][t] < min || f.Samples[p][t] == 0 {
				return false
			}
		}
	}
	return true
}

// meetProbability is the probability that a value predicted as pred ms, with residual
// standard deviation sigma ms, stays within limit ms, under a normal residual. A sigma
// of 0 makes it a step.
func meetProbability(pred, sigma, limit float64) float64 {
	if !(sigma > 0) {
		if pred <= limit {
			return 1
		}
		return 0
	}
	return 0.5 * math.Erfc((pred-limit)/(sigma*math.Sqrt2))
}

// PathInputs returns the features of a request of prompt tokens whose effective ISL on
// its decode row d is eff, on path: local prefills on d, remote on prefill row p
// (unused for local). The slo policy predicts with them and the state learns from them
// (from the rows of the decision record), so both read the same definition.
func PathInputs(path LatencyPath, prompt, eff int64, d, p *Candidate) LatencyInputs {
	in := LatencyInputs{DecodeRequests: d.ActiveRequests, DecodeBlocks: d.ActiveDecodeBlocks,
		DecodePrefill: d.ActivePrefillTokens, DecodeFill: decodeFill(d), DecodeRecentLocal: d.RecentLocalPrefill}
	B := int64(d.BlockSize)
	if path == PathLocal || p == nil {
		in.Uncached, in.Tier, in.Queued = eff, int64(d.HostBlocks+d.DiskBlocks)*B, d.ActivePrefillTokens
		return in
	}
	pb := int64(p.BlockSize)
	in.Uncached = prompt - min(int64(p.OverlapBlocks)*pb, prompt)
	in.Tier = int64(p.HostBlocks+p.DiskBlocks) * pb
	in.Queued = p.ActivePrefillTokens
	in.Transfer = prompt - min(int64(d.OverlapBlocks)*B, prompt)
	return in
}

// decodeFill is the decode row's KV fill in per-mille: the load sample's used blocks
// when there is one, else the router's potential decode blocks; 0 with an unknown
// capacity.
func decodeFill(d *Candidate) int64 {
	if d.TotalKVBlocks <= 0 {
		return 0
	}
	used := d.PotentialDecodeBlocks
	if d.LoadKnown {
		used = d.LoadKVUsedBlocks
	}
	return min(max(used, 0), d.TotalKVBlocks) * 1000 / d.TotalKVBlocks
}
