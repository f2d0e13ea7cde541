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
// by accident. prefill_busy_threshold is the effective value, after inheriting
// --router-queue-threshold, since that is what decisions read.
func (c *Config) CanonicalJSON() []byte {
	b := make([]byte, 0, 512)
	b = append(b, '{')
	b = appendKey(b, "active_request_expiry_ns", true)
	b = appendInt(b, int64(c.ActiveRequestExpiry))
	b = appendKey(b, "conditional_disagg", false)
	b = appendBool(b, c.ConditionalDisagg)
	b = appendKey(b, "decode_busy_source", false)
	b = appendString(b, string(c.Disagg.DecodeBusySource))
	b = appendKey(b, "decode_busy_threshold", false)
	b = appendOptFloat(b, c.Disagg.DecodeBusyThreshold)
	b = appendKey(b, "eff_isl_ratio_threshold", false)
	b = appendFloat(b, c.Disagg.EffISLRatioThreshold)
	b = appendKey(b, "eff_isl_threshold", false)
	b = appendInt(b, c.Disagg.EffISLThreshold)
	b = appendKey(b, "kv_events", false)
	b = appendBool(b, c.KVEvents)
	b = appendKey(b, "overlap_score_credit", false)
	b = appendFloat(b, c.OverlapScoreCredit)
	b = appendKey(b, "policy", false)
	b = appendString(b, string(c.Disagg.Policy))
	b = appendKey(b, "prefill_busy_threshold", false)
	thr, ok := c.PrefillBusyThreshold()
	b = appendOptFloat(b, OptFloat{Value: thr, Set: ok})
	b = appendKey(b, "prefill_load_scale", false)
	b = appendFloat(b, c.PrefillLoadScale)
	b = appendKey(b, "queue_threshold", false)
	b = appendOptFloat(b, c.QueueThreshold)
	b = appendKey(b, "router_mode", false)
	b = appendString(b, string(c.RouterMode))
	b = appendKey(b, "temperature", false)
	b = appendFloat(b, c.Temperature)
	b = appendKey(b, "v", false)
	b = appendInt(b, 1)
	return append(b, '}')
}

// Hash is the config version hash carried by every decision: the first 8 bytes of the
// SHA-256 of CanonicalJSON, as 16 lower-case hex digits. SHA-256 rather than the
// project's XXH3 because the hash is computed once at start-up and is an identity that
// outlives any one build, where a well-specified cryptographic hash is the safer choice.
func (c *Config) Hash() string {
	sum := sha256.Sum256(c.CanonicalJSON())
	return hex.EncodeToString(sum[:8])
}
