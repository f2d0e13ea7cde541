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
	o := openObject(b)
	o.str("request_id", d.RequestID)
	o.str("model", d.Model)
	o.str("mode", string(d.Mode))
	o.str("reason", string(d.Reason))
	o.str("policy", string(d.Policy))
	o.str("config_hash", d.ConfigHash)
	o.str("decode_worker", d.DecodeWorker)
	o.key("prefill_worker")
	if d.PrefillWorker == "" {
		o.b = append(o.b, "null"...)
	} else {
		o.b = appendString(o.b, d.PrefillWorker)
	}
	o.int("prompt_tokens", d.PromptTokens)
	o.int("block_size", int64(d.BlockSize))
	o.int("cached_tokens", d.CachedTokens)
	o.int("effective_isl", d.EffectiveISL)
	o.float("effective_isl_ratio", d.Ratio)
	o.bool("policy_bypass", d.PolicyBypass)
	o.str("decided_by", string(d.DecidedBy))
	o.float("distance", d.Distance)
	o.key("eff_isl_check")
	o.b = d.EffISLCheck.appendJSON(o.b)
	o.key("ratio_check")
	o.b = d.RatioCheck.appendJSON(o.b)
	o.key("prefill_busy_check")
	o.b = d.PrefillBusy.appendJSON(o.b)
	o.key("decode_busy_check")
	o.b = d.DecodeBusy.appendJSON(o.b)
	if d.SLO.Evaluated {
		// Only under the slo policy, so that the other policies' bytes are unchanged.
		o.key("slo")
		o.b = d.SLO.appendJSON(o.b)
	}
	o.key("candidates")
	o.b = append(o.b, '[')
	for i := range d.Candidates {
		if i > 0 {
			o.b = append(o.b, ',')
		}
		o.b = d.Candidates[i].appendJSON(o.b)
	}
	o.b = append(o.b, ']')
	return o.close()
}

// MarshalJSON returns the canonical encoding, so that encoding/json callers (the API)
// write exactly the bytes that tests and the decision log compare.
func (d *Decision) MarshalJSON() ([]byte, error) {
	return d.AppendCanonicalJSON(make([]byte, 0, 1024+512*len(d.Candidates))), nil
}

func (c *Check) appendJSON(b []byte) []byte {
	o := openObject(b)
	o.str("name", string(c.Name))
	o.bool("evaluated", c.Evaluated)
	o.bool("known", c.Known)
	o.float("value", c.Value)
	o.float("limit", c.Limit)
	o.bool("hit", c.Hit)
	o.str("note", c.Note)
	return o.close()
}

func (c *Candidate) appendJSON(b []byte) []byte {
	o := openObject(b)
	o.str("worker", c.Worker)
	o.str("pool", string(c.Pool))
	o.bool("eligible", c.Eligible)
	o.str("excluded", c.Excluded)
	o.int("block_size", int64(c.BlockSize))
	o.int("overlap_blocks", int64(c.OverlapBlocks))
	o.int("host_blocks", int64(c.HostBlocks))
	o.int("disk_blocks", int64(c.DiskBlocks))
	o.int("active_prefill_tokens", c.ActivePrefillTokens)
	o.float("raw_prefill_blocks", c.RawPrefillBlocks)
	o.float("overlap_credit", c.OverlapCredit)
	o.float("prefill_term", c.PrefillTerm)
	o.int("active_decode_blocks", c.ActiveDecodeBlocks)
	o.int("request_blocks", c.RequestBlocks)
	o.int("shared_active_blocks", c.SharedActiveBlocks)
	o.int("potential_decode_blocks", c.PotentialDecodeBlocks)
	o.float("cost", c.Cost)
	o.hex64("tie_hash", uint64(c.TieHash))
	o.float("probability", c.Probability)
	o.int("total_kv_blocks", c.TotalKVBlocks)
	o.int("max_num_batched_tokens", c.MaxNumBatchedTokens)
	o.bool("load_known", c.LoadKnown)
	o.int("load_kv_used_blocks", c.LoadKVUsedBlocks)
	o.int("load_prefill_tokens", c.LoadPrefillTokens)
	if c.ActiveRequests != 0 {
		// Left out at 0, so that tables without the count keep their bytes.
		o.int("active_requests", c.ActiveRequests)
	}
	if c.RecentLocalPrefill != 0 {
		o.int("recent_local_prefill", c.RecentLocalPrefill)
	}
	if c.RecentRequests != 0 {
		o.int("recent_requests", c.RecentRequests)
	}
	o.bool("picked", c.Picked)
	return o.close()
}

func (s *SLOPrediction) appendJSON(b []byte) []byte {
	o := openObject(b)
	o.bool("evaluated", s.Evaluated)
	o.bool("warm", s.Warm)
	o.int("samples", s.Samples)
	o.float("slo_ttft_ms", s.TTFTLimitMs)
	o.float("slo_itl_ms", s.ITLLimitMs)
	o.float("local_ttft_ms", s.LocalTTFTMs)
	o.float("local_itl_ms", s.LocalITLMs)
	o.float("remote_ttft_ms", s.RemoteTTFTMs)
	o.float("remote_itl_ms", s.RemoteITLMs)
	o.int("running_requests", s.RunningRequests)
	o.float("others_itl_ms", s.OthersITLMs)
	o.float("others_base_itl_ms", s.OthersBaseITLMs)
	o.float("next_ttft_ms", s.NextTTFTMs)
	o.float("next_itl_ms", s.NextITLMs)
	o.float("remote_decode_ttft_ms", s.RemoteDecodeTTFTMs)
	o.float("local_goodput", s.LocalGoodput)
	o.float("remote_goodput", s.RemoteGoodput)
	o.float("local_delay_charge", s.LocalDelayCharge)
	o.float("remote_delay_charge", s.RemoteDelayCharge)
	o.float("typical_ttft_ms", s.TypicalTTFTMs)
	o.float("margin", s.Margin)
	return o.close()
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
