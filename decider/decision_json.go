package decider

import (
	"fmt"
	"strconv"
)

// AppendCanonicalJSON appends the canonical encoding of the decision to b and returns
// the extended buffer. It is the byte-identical form used for the decision record and
// for tests: equal decisions always encode to equal bytes.
//
// Encoding: one JSON object without white space; keys in the order of the struct fields
// and always present; floats as strconv 'g' with the shortest round-tripping precision
// (negative zero as 0); hashes as 16 lower-case hex digits in a string; an empty
// prefill_worker as null, as the API contract shows it. encoding/json decodes it back
// into an equal Decision (see the round-trip test).
func (d *Decision) AppendCanonicalJSON(b []byte) []byte {
	b = append(b, '{')
	b = appendKey(b, "request_id", true)
	b = appendString(b, d.RequestID)
	b = appendKey(b, "model", false)
	b = appendString(b, d.Model)
	b = appendKey(b, "mode", false)
	b = appendString(b, string(d.Mode))
	b = appendKey(b, "reason", false)
	b = appendString(b, string(d.Reason))
	b = appendKey(b, "policy", false)
	b = appendString(b, string(d.Policy))
	b = appendKey(b, "config_hash", false)
	b = appendString(b, d.ConfigHash)
	b = appendKey(b, "decode_worker", false)
	b = appendString(b, d.DecodeWorker)
	b = appendKey(b, "prefill_worker", false)
	if d.PrefillWorker == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, d.PrefillWorker)
	}
	b = appendKey(b, "prompt_tokens", false)
	b = appendInt(b, d.PromptTokens)
	b = appendKey(b, "block_size", false)
	b = appendInt(b, int64(d.BlockSize))
	b = appendKey(b, "cached_tokens", false)
	b = appendInt(b, d.CachedTokens)
	b = appendKey(b, "effective_isl", false)
	b = appendInt(b, d.EffectiveISL)
	b = appendKey(b, "effective_isl_ratio", false)
	b = appendFloat(b, d.Ratio)
	b = appendKey(b, "policy_bypass", false)
	b = appendBool(b, d.PolicyBypass)
	b = appendKey(b, "decided_by", false)
	b = appendString(b, string(d.DecidedBy))
	b = appendKey(b, "distance", false)
	b = appendFloat(b, d.Distance)
	b = appendKey(b, "eff_isl_check", false)
	b = d.EffISLCheck.appendJSON(b)
	b = appendKey(b, "ratio_check", false)
	b = d.RatioCheck.appendJSON(b)
	b = appendKey(b, "prefill_busy_check", false)
	b = d.PrefillBusy.appendJSON(b)
	b = appendKey(b, "decode_busy_check", false)
	b = d.DecodeBusy.appendJSON(b)
	b = appendKey(b, "candidates", false)
	b = append(b, '[')
	for i := range d.Candidates {
		if i > 0 {
			b = append(b, ',')
		}
		b = d.Candidates[i].appendJSON(b)
	}
	b = append(b, ']')
	return append(b, '}')
}

// MarshalJSON returns the canonical encoding, so that encoding/json callers (the API)
// write exactly the bytes that tests and the decision log compare.
func (d *Decision) MarshalJSON() ([]byte, error) {
	return d.AppendCanonicalJSON(make([]byte, 0, 1024+512*len(d.Candidates))), nil
}

func (c *Check) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = appendKey(b, "name", true)
	b = appendString(b, string(c.Name))
	b = appendKey(b, "evaluated", false)
	b = appendBool(b, c.Evaluated)
	b = appendKey(b, "known", false)
	b = appendBool(b, c.Known)
	b = appendKey(b, "value", false)
	b = appendFloat(b, c.Value)
	b = appendKey(b, "limit", false)
	b = appendFloat(b, c.Limit)
	b = appendKey(b, "hit", false)
	b = appendBool(b, c.Hit)
	b = appendKey(b, "note", false)
	b = appendString(b, c.Note)
	return append(b, '}')
}

func (c *Candidate) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = appendKey(b, "worker", true)
	b = appendString(b, c.Worker)
	b = appendKey(b, "pool", false)
	b = appendString(b, string(c.Pool))
	b = appendKey(b, "eligible", false)
	b = appendBool(b, c.Eligible)
	b = appendKey(b, "excluded", false)
	b = appendString(b, c.Excluded)
	b = appendKey(b, "block_size", false)
	b = appendInt(b, int64(c.BlockSize))
	b = appendKey(b, "overlap_blocks", false)
	b = appendInt(b, int64(c.OverlapBlocks))
	b = appendKey(b, "host_blocks", false)
	b = appendInt(b, int64(c.HostBlocks))
	b = appendKey(b, "disk_blocks", false)
	b = appendInt(b, int64(c.DiskBlocks))
	b = appendKey(b, "active_prefill_tokens", false)
	b = appendInt(b, c.ActivePrefillTokens)
	b = appendKey(b, "raw_prefill_blocks", false)
	b = appendFloat(b, c.RawPrefillBlocks)
	b = appendKey(b, "overlap_credit", false)
	b = appendFloat(b, c.OverlapCredit)
	b = appendKey(b, "prefill_term", false)
	b = appendFloat(b, c.PrefillTerm)
	b = appendKey(b, "active_decode_blocks", false)
	b = appendInt(b, c.ActiveDecodeBlocks)
	b = appendKey(b, "request_blocks", false)
	b = appendInt(b, c.RequestBlocks)
	b = appendKey(b, "shared_active_blocks", false)
	b = appendInt(b, c.SharedActiveBlocks)
	b = appendKey(b, "potential_decode_blocks", false)
	b = appendInt(b, c.PotentialDecodeBlocks)
	b = appendKey(b, "cost", false)
	b = appendFloat(b, c.Cost)
	b = appendKey(b, "tie_hash", false)
	b = appendHex64(b, uint64(c.TieHash))
	b = appendKey(b, "probability", false)
	b = appendFloat(b, c.Probability)
	b = appendKey(b, "total_kv_blocks", false)
	b = appendInt(b, c.TotalKVBlocks)
	b = appendKey(b, "max_num_batched_tokens", false)
	b = appendInt(b, c.MaxNumBatchedTokens)
	b = appendKey(b, "load_known", false)
	b = appendBool(b, c.LoadKnown)
	b = appendKey(b, "load_kv_used_blocks", false)
	b = appendInt(b, c.LoadKVUsedBlocks)
	b = appendKey(b, "load_prefill_tokens", false)
	b = appendInt(b, c.LoadPrefillTokens)
	b = appendKey(b, "picked", false)
	b = appendBool(b, c.Picked)
	return append(b, '}')
}

// MarshalText writes the hash as 16 lower-case hex digits.
func (h Hash64) MarshalText() ([]byte, error) {
	b := appendHex64(nil, uint64(h))
	return b[1 : len(b)-1], nil
}

// UnmarshalText reads 16 hex digits.
func (h *Hash64) UnmarshalText(text []byte) error {
	if len(text) != 16 {
		return fmt.Errorf("decider: hash %q: want 16 hex digits", text)
	}
	v, err := strconv.ParseUint(string(text), 16, 64)
	if err != nil {
		return fmt.Errorf("decider: hash %q: %w", text, err)
	}
	*h = Hash64(v)
	return nil
}
