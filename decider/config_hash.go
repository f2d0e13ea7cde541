package decider

import (
	"crypto/sha256"
	"encoding/hex"
)

// CanonicalJSON is the documented canonical encoding of the config, the input of Hash.
//
// Encoding: one JSON object, no white space, keys in byte order, every key always
// present; an unset optional is null; floats as strconv 'g' with the shortest
// round-tripping precision; durations as integer nanoseconds; "v" is the version of this
// encoding and changes whenever a key is added, so that old and new hashes never collide
// by accident; the slo policy's keys are present only under that policy, so that adding
// them changed no other config's hash. prefill_busy_threshold is the effective value, after inheriting
// --router-queue-threshold, since that is what decisions read.
func (c *Config) CanonicalJSON() []byte {
	o := openObject(make([]byte, 0, 512))
	o.int("active_request_expiry_ns", int64(c.ActiveRequestExpiry))
	o.bool("conditional_disagg", c.ConditionalDisagg)
	o.str("decode_busy_source", string(c.Disagg.DecodeBusySource))
	o.optFloat("decode_busy_threshold", c.Disagg.DecodeBusyThreshold)
	o.float("eff_isl_ratio_threshold", c.Disagg.EffISLRatioThreshold)
	o.int("eff_isl_threshold", c.Disagg.EffISLThreshold)
	o.bool("kv_events", c.KVEvents)
	o.float("overlap_score_credit", c.OverlapScoreCredit)
	o.str("policy", string(c.Disagg.Policy))
	thr, ok := c.PrefillBusyThreshold()
	o.optFloat("prefill_busy_threshold", OptFloat{Value: thr, Set: ok})
	o.float("prefill_load_scale", c.PrefillLoadScale)
	o.optFloat("queue_threshold", c.QueueThreshold)
	o.str("router_mode", string(c.RouterMode))
	if c.Disagg.Policy == PolicySLO {
		// Only the slo policy reads these, and leaving them out otherwise keeps the
		// hashes of every other config as they were.
		o.bool("slo_itl_guard", c.Disagg.SLOITLGuard)
		o.float("slo_itl_ms", c.Disagg.SLOITLMs)
		o.int("slo_min_samples", c.Disagg.SLOMinSamples)
		o.float("slo_ttft_ms", c.Disagg.SLOTTFTMs)
	}
	o.float("temperature", c.Temperature)
	o.int("v", 1)
	return o.close()
}

// Hash is the config version hash carried by every decision: the first 8 bytes of the
// SHA-256 of CanonicalJSON, as 16 lower-case hex digits. SHA-256 rather than the
// project's XXH3 because the hash is computed once at start-up and is an identity that
// outlives any one build, where a well-specified cryptographic hash is the safer choice.
func (c *Config) Hash() string {
	sum := sha256.Sum256(c.CanonicalJSON())
	return hex.EncodeToString(sum[:8])
}
