package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/pdrouter/pdrouter/decider"
)

// canonicalKeys are the keys of decider.Config.CanonicalJSON, version 1, in
// their encoded order. ParseConfig accepts exactly these: a record whose
// config_json has another key was written by a build with another encoding
// version, and guessing its meaning would make a replay silently wrong.
var canonicalKeys = []string{
	"active_request_expiry_ns", "conditional_disagg", "decode_busy_source", "decode_busy_threshold",
	"eff_isl_ratio_threshold", "eff_isl_threshold", "kv_events", "overlap_score_credit", "policy",
	"prefill_busy_threshold", "prefill_load_scale", "queue_threshold", "router_mode", "temperature", "v",
}

// sloKeys are the keys CanonicalJSON adds under the slo policy only.
var sloKeys = []string{"slo_itl_guard", "slo_itl_ms", "slo_min_samples", "slo_ttft_ms"}

// ParseConfig is the inverse of decider.Config.CanonicalJSON: it rebuilds the
// config a decision was made under from the config_json of its record.
//
// The decider package only encodes its config (the record needs nothing
// else), so the decoder lives here, next to its one user. It is strict, and
// it proves itself on every call: the parsed config must encode back to the
// exact input bytes, so a config_json that is not canonical, or a change of
// the encoding that this decoder does not know, is an error rather than a
// replay under a config that differs from the one that decided.
//
// prefill_busy_threshold is recorded after inheriting queue_threshold (the
// value decisions read), so it is restored as an explicit threshold; that
// gives the same decisions and the same canonical bytes.
func ParseConfig(configJSON string) (decider.Config, error) {
	var cfg decider.Config
	if configJSON == "" {
		return cfg, fmt.Errorf("replay: the record has no config_json")
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(configJSON)))
	dec.UseNumber()
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return cfg, fmt.Errorf("replay: config_json is not a JSON object: %w", err)
	}
	for k := range raw {
		if !slices.Contains(canonicalKeys, k) && !slices.Contains(sloKeys, k) {
			return cfg, fmt.Errorf("replay: config_json has key %q, which canonical config v1 does not have", k)
		}
	}
	for _, k := range canonicalKeys {
		if _, ok := raw[k]; !ok {
			return cfg, fmt.Errorf("replay: config_json lacks key %q: it is not the decider's canonical JSON", k)
		}
	}
	p := &cfgParser{raw: raw}
	if v := p.int("v"); p.err == nil && v != 1 {
		return cfg, fmt.Errorf("replay: config_json has encoding version %d; this build reads version 1", v)
	}
	cfg.ActiveRequestExpiry = time.Duration(p.int("active_request_expiry_ns"))
	cfg.ConditionalDisagg = p.bool("conditional_disagg")
	cfg.Disagg.DecodeBusySource = decider.BusySource(p.str("decode_busy_source"))
	cfg.Disagg.DecodeBusyThreshold = p.opt("decode_busy_threshold")
	cfg.Disagg.EffISLRatioThreshold = p.float("eff_isl_ratio_threshold")
	cfg.Disagg.EffISLThreshold = p.int("eff_isl_threshold")
	cfg.KVEvents = p.bool("kv_events")
	cfg.OverlapScoreCredit = p.float("overlap_score_credit")
	cfg.Disagg.Policy = decider.Policy(p.str("policy"))
	cfg.Disagg.PrefillBusyThreshold = p.opt("prefill_busy_threshold")
	cfg.PrefillLoadScale = p.float("prefill_load_scale")
	cfg.QueueThreshold = p.opt("queue_threshold")
	cfg.RouterMode = decider.RouterMode(p.str("router_mode"))
	cfg.Temperature = p.float("temperature")
	cfg.Disagg.SLOTTFTMs, cfg.Disagg.SLOITLMs = decider.DefaultSLOTTFTMs, decider.DefaultSLOITLMs
	cfg.Disagg.SLOMinSamples, cfg.Disagg.SLOITLGuard = decider.DefaultSLOMinSamples, true
	if _, ok := raw["slo_ttft_ms"]; ok {
		// Present only under the slo policy; the canonical check below rejects
		// them under any other.
		cfg.Disagg.SLOITLGuard = p.bool("slo_itl_guard")
		cfg.Disagg.SLOITLMs = p.float("slo_itl_ms")
		cfg.Disagg.SLOMinSamples = p.int("slo_min_samples")
		cfg.Disagg.SLOTTFTMs = p.float("slo_ttft_ms")
	}
	if p.err != nil {
		return cfg, p.err
	}
	if got := cfg.CanonicalJSON(); string(got) != configJSON {
		return cfg, fmt.Errorf("replay: config_json is not in canonical form (it re-encodes as %s)", got)
	}
	return cfg, nil
}

// cfgParser decodes typed values, keeping the first error.
type cfgParser struct {
	raw map[string]json.RawMessage
	err error
}

func (p *cfgParser) fail(key, want string) {
	if p.err == nil {
		p.err = fmt.Errorf("replay: config_json %s is %s, want %s", key, p.raw[key], want)
	}
}

func (p *cfgParser) number(key string) (json.Number, bool) {
	dec := json.NewDecoder(bytes.NewReader(p.raw[key]))
	dec.UseNumber()
	tok, err := dec.Token()
	n, ok := tok.(json.Number)
	return n, err == nil && ok
}

func (p *cfgParser) int(key string) int64 {
	n, ok := p.number(key)
	v, err := strconv.ParseInt(string(n), 10, 64)
	if !ok || err != nil {
		p.fail(key, "an integer")
	}
	return v
}

func (p *cfgParser) float(key string) float64 {
	n, ok := p.number(key)
	v, err := strconv.ParseFloat(string(n), 64)
	if !ok || err != nil || math.IsInf(v, 0) {
		p.fail(key, "a finite number")
	}
	return v
}

func (p *cfgParser) opt(key string) decider.OptFloat {
	if string(p.raw[key]) == "null" {
		return decider.OptFloat{}
	}
	return decider.Some(p.float(key))
}

func (p *cfgParser) bool(key string) bool {
	var b bool
	if err := json.Unmarshal(p.raw[key], &b); err != nil {
		p.fail(key, "true or false")
	}
	return b
}

func (p *cfgParser) str(key string) string {
	var s string
	if err := json.Unmarshal(p.raw[key], &s); err != nil {
		p.fail(key, "a string")
	}
	return s
}

// WithDisagg returns base with its disaggregation config replaced by the
// JSON of --router-conditional-disagg-config (keys left out take their
// defaults, exactly as on the router) and, when enable is not nil, with
// --router-conditional-disagg set to *enable. Every other router setting
// (mode, credits, temperature, queue threshold) stays the record's own, so a
// what-if changes the policy and nothing else.
func WithDisagg(base decider.Config, disaggJSON []byte, enable *bool) (decider.Config, error) {
	cfg := base
	if len(bytes.TrimSpace(disaggJSON)) > 0 {
		d, err := decider.ParseDisaggConfig(disaggJSON)
		if err != nil {
			return cfg, err
		}
		cfg.Disagg = d
	}
	if enable != nil {
		cfg.ConditionalDisagg = *enable
	}
	return cfg, cfg.Validate()
}
