package decider

import "time"

// RouterMode is --router-mode. The names are Dynamo's.
type RouterMode string

const (
	// RouterModeKV is KV-aware routing, the mode conditional disaggregation requires.
	// With --router-kv-events=false it is the approximate mode: the state predicts cache
	// contents from the router's own decisions instead of reading KV events.
	RouterModeKV RouterMode = "kv"
	// RouterModeRoundRobin and RouterModeRandom ignore the cost function. Strict
	// rotation needs a shared counter that a pure, replicated decider does not have, so
	// both pick by rendezvous hashing: the eligible worker with the lowest
	// hash(request id, worker id). The spread is uniform and replay gives the same worker.
	RouterModeRoundRobin RouterMode = "round-robin"
	RouterModeRandom     RouterMode = "random"
)

// BusySource selects what the decode busy guard reads (a pdrouter addition).
type BusySource string

const (
	// BusySourceRouter reads the router-projected potential decode blocks (default).
	BusySourceRouter BusySource = "router"
	// BusySourceWorker reads kv_used_blocks from the worker's latest load sample.
	BusySourceWorker BusySource = "worker"
	// BusySourceMax reads the larger of the two. It exists because router-side
	// accounting undercounts occupancy on prefix-heavy loads.
	BusySourceMax BusySource = "max"
)

// Defaults, as the spec states them.
const (
	DefaultEffISLThreshold      = 2048
	DefaultEffISLRatioThreshold = 0.7
	DefaultOverlapScoreCredit   = 1.0
	DefaultPrefillLoadScale     = 1.0
	DefaultTemperature          = 0.0
	DefaultActiveRequestExpiry  = 300 * time.Second
	// UnknownMaxNumBatchedTokens is what an unknown max_num_batched_tokens is taken as:
	// large enough that the worker is practically never prefill-busy.
	UnknownMaxNumBatchedTokens = 10_000_000
	// The slo policy's defaults: TTFT ≤ 2 s and mean ITL ≤ 50 ms, and 50 samples per
	// path and target before the model is trusted (fewer chose badly in the
	// simulator's grid; more keep the cold start's rule, isl_or_load, in charge for
	// longer, and it collapses where decode workers are scarce).
	DefaultSLOTTFTMs     = 2000.0
	DefaultSLOITLMs      = 50.0
	DefaultSLOMinSamples = 50
)

// DisaggConfig is the JSON of --router-conditional-disagg-config.
type DisaggConfig struct {
	Policy               Policy
	EffISLThreshold      int64
	EffISLRatioThreshold float64
	// PrefillBusyThreshold, when unset, inherits Config.QueueThreshold.
	PrefillBusyThreshold OptFloat
	// DecodeBusyThreshold, when unset, switches the decode busy guard off.
	DecodeBusyThreshold OptFloat
	DecodeBusySource    BusySource
	// The slo policy's SLOs and model settings (docs/slo-policy.md). Other policies do
	// not read them, and the config hash includes them only under slo.
	SLOTTFTMs     float64
	SLOITLMs      float64
	SLOMinSamples int64
	SLOITLGuard   bool
}

// Config is everything that changes a decision. Its canonical encoding is hashed into
// every decision record (Hash), so that a replay can tell which rules were in force.
type Config struct {
	RouterMode        RouterMode // --router-mode
	KVEvents          bool       // --router-kv-events
	ConditionalDisagg bool       // --router-conditional-disagg
	Disagg            DisaggConfig
	// QueueThreshold is --router-queue-threshold, a fraction of max_num_batched_tokens.
	QueueThreshold     OptFloat
	OverlapScoreCredit float64 // --router-kv-overlap-score-credit
	PrefillLoadScale   float64 // --router-prefill-load-scale
	Temperature        float64 // --router-temperature
	// ActiveRequestExpiry is --router-active-request-expiry. The decider does not read
	// it (expiry is the state's job, by event time), but it changes what the state
	// reports and so belongs in the config hash.
	ActiveRequestExpiry time.Duration
}

// DefaultDisaggConfig returns the JSON defaults of the spec.
func DefaultDisaggConfig() DisaggConfig {
	return DisaggConfig{
		Policy:               PolicyISLBounding,
		EffISLThreshold:      DefaultEffISLThreshold,
		EffISLRatioThreshold: DefaultEffISLRatioThreshold,
		DecodeBusySource:     BusySourceRouter,
		SLOTTFTMs:            DefaultSLOTTFTMs,
		SLOITLMs:             DefaultSLOITLMs,
		SLOMinSamples:        DefaultSLOMinSamples,
		SLOITLGuard:          true,
	}
}

// DefaultConfig returns the defaults: KV mode with KV events, conditional
// disaggregation off. pdrouter defaults --router-mode to kv (Dynamo's frontend defaults to
// round-robin) because KV-aware routing is what the product is for.
func DefaultConfig() Config {
	return Config{
		RouterMode:          RouterModeKV,
		KVEvents:            true,
		Disagg:              DefaultDisaggConfig(),
		OverlapScoreCredit:  DefaultOverlapScoreCredit,
		PrefillLoadScale:    DefaultPrefillLoadScale,
		Temperature:         DefaultTemperature,
		ActiveRequestExpiry: DefaultActiveRequestExpiry,
	}
}

// PrefillBusyThreshold returns the threshold the load policies use after inheriting
// --router-queue-threshold, and whether there is one.
func (c *Config) PrefillBusyThreshold() (float64, bool) {
	if c.Disagg.PrefillBusyThreshold.Set {
		return c.Disagg.PrefillBusyThreshold.Value, true
	}
	if c.QueueThreshold.Set {
		return c.QueueThreshold.Value, true
	}
	return 0, false
}

// Approximate reports whether the router runs KV-aware without KV events, predicting
// cache contents from its own decisions.
func (c *Config) Approximate() bool { return c.RouterMode == RouterModeKV && !c.KVEvents }
