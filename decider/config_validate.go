package decider

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Flag names, shared with deciderflags so that error messages and flags cannot drift.
const (
	FlagRouterMode           = "router-mode"
	FlagKVEvents             = "router-kv-events"
	FlagConditionalDisagg    = "router-conditional-disagg"
	FlagConditionalDisaggCfg = "router-conditional-disagg-config"
	FlagQueueThreshold       = "router-queue-threshold"
	FlagOverlapScoreCredit   = "router-kv-overlap-score-credit"
	FlagPrefillLoadScale     = "router-prefill-load-scale"
	FlagTemperature          = "router-temperature"
	FlagActiveRequestExpiry  = "router-active-request-expiry"
)

// Keys of the JSON of --router-conditional-disagg-config. A PolicySpec names the keys
// its rule reads with them.
const (
	FieldPolicy               = "policy"
	FieldEffISLThreshold      = "eff_isl_threshold"
	FieldEffISLRatioThreshold = "eff_isl_ratio_threshold"
	FieldPrefillBusyThreshold = "prefill_busy_threshold"
	FieldDecodeBusyThreshold  = "decode_busy_threshold"
	FieldDecodeBusySource     = "decode_busy_source"
	FieldSLOTTFTMs            = "slo_ttft_ms"
	FieldSLOITLMs             = "slo_itl_ms"
	FieldSLOMinSamples        = "slo_min_samples"
	FieldSLOITLGuard          = "slo_itl_guard"
)

const (
	validRangeNonNegative      = "valid range is [0, +Inf)"
	validRangeUnit             = "valid range is [0.0, 1.0]"
	validRangeNonNegativeInt64 = "valid range is integers in [0, 9223372036854775807]"
)

// ConfigError is one start-up configuration error. It names the flag and, for the JSON
// config, the field, so the operator knows exactly what to change.
type ConfigError struct {
	Flag  string // without the leading dashes
	Field string // JSON field of --router-conditional-disagg-config, or ""
	Msg   string
}

func (e *ConfigError) Error() string {
	if e.Field != "" {
		return "--" + e.Flag + ": " + e.Field + " " + e.Msg
	}
	return "--" + e.Flag + ": " + e.Msg
}

// Validate reports every problem of the config at once (errors.Join, in a fixed order),
// so that an operator fixes a bad deployment in one round. It checks ranges, that a load
// policy has a prefill busy threshold after inheriting --router-queue-threshold, and that
// conditional disaggregation has KV mode and KV events. Whether both pools exist can only
// be known from the registry: see CheckPools.
func (c *Config) Validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	switch c.RouterMode {
	case RouterModeKV, RouterModeRoundRobin, RouterModeRandom:
	default:
		add(&ConfigError{Flag: FlagRouterMode, Msg: fmt.Sprintf("is %q; valid values are kv, round-robin, random", string(c.RouterMode))})
	}
	add(c.Disagg.Validate())
	add(checkNonNegative(FlagQueueThreshold, "", c.QueueThreshold))
	add(checkNonNegative(FlagOverlapScoreCredit, "", Some(c.OverlapScoreCredit)))
	add(checkNonNegative(FlagPrefillLoadScale, "", Some(c.PrefillLoadScale)))
	add(checkNonNegative(FlagTemperature, "", Some(c.Temperature)))
	if c.ActiveRequestExpiry <= 0 {
		add(&ConfigError{Flag: FlagActiveRequestExpiry, Msg: fmt.Sprintf("is %s; valid range is (0s, +Inf)", c.ActiveRequestExpiry)})
	}
	if spec, ok := LookupPolicy(c.Disagg.Policy); ok && spec.NeedsPrefillBusyThreshold() {
		if _, ok := c.PrefillBusyThreshold(); !ok {
			add(&ConfigError{Flag: FlagConditionalDisaggCfg, Field: FieldPrefillBusyThreshold, Msg: fmt.Sprintf(
				"is unset and --%s is unset, but policy %s needs a prefill busy threshold; set one of them (%s)",
				FlagQueueThreshold, c.Disagg.Policy, validRangeNonNegative)})
		}
	}
	if c.ConditionalDisagg {
		var missing []string
		if c.RouterMode != RouterModeKV {
			missing = append(missing, fmt.Sprintf("KV-aware mode (--%s kv; it is %q)", FlagRouterMode, string(c.RouterMode)))
		}
		if !c.KVEvents {
			missing = append(missing, fmt.Sprintf("KV events from the workers (--%s; it is off, which is approximate mode)", FlagKVEvents))
		}
		if len(missing) > 0 {
			add(&ConfigError{Flag: FlagConditionalDisagg, Msg: "requires " + strings.Join(missing, " and ")})
		}
	}
	return errors.Join(errs...)
}

// Validate checks the JSON config's values.
func (d *DisaggConfig) Validate() error {
	var errs []error
	if _, ok := LookupPolicy(d.Policy); !ok {
		errs = append(errs, &ConfigError{Flag: FlagConditionalDisaggCfg, Field: FieldPolicy,
			Msg: fmt.Sprintf("is %q; valid values are %s", string(d.Policy), strings.Join(PolicyNames(), ", "))})
	}
	if d.EffISLThreshold < 0 {
		errs = append(errs, &ConfigError{Flag: FlagConditionalDisaggCfg, Field: FieldEffISLThreshold,
			Msg: fmt.Sprintf("is %d; %s", d.EffISLThreshold, validRangeNonNegativeInt64)})
	}
	if r := d.EffISLRatioThreshold; !(r >= 0 && r <= 1) {
		errs = append(errs, &ConfigError{Flag: FlagConditionalDisaggCfg, Field: FieldEffISLRatioThreshold,
			Msg: fmt.Sprintf("is %s; %s", fmtFloat(r), validRangeUnit)})
	}
	if err := checkNonNegative(FlagConditionalDisaggCfg, FieldPrefillBusyThreshold, d.PrefillBusyThreshold); err != nil {
		errs = append(errs, err)
	}
	if err := checkNonNegative(FlagConditionalDisaggCfg, FieldDecodeBusyThreshold, d.DecodeBusyThreshold); err != nil {
		errs = append(errs, err)
	}
	for _, f := range []struct {
		field string
		v     float64
	}{{FieldSLOTTFTMs, d.SLOTTFTMs}, {FieldSLOITLMs, d.SLOITLMs}} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			errs = append(errs, &ConfigError{Flag: FlagConditionalDisaggCfg, Field: f.field,
				Msg: fmt.Sprintf("is %s; valid range is (0, +Inf)", fmtFloat(f.v))})
		}
	}
	if d.SLOMinSamples < 1 {
		errs = append(errs, &ConfigError{Flag: FlagConditionalDisaggCfg, Field: FieldSLOMinSamples,
			Msg: fmt.Sprintf("is %d; valid range is integers in [1, 9223372036854775807]", d.SLOMinSamples)})
	}
	switch d.DecodeBusySource {
	case BusySourceRouter, BusySourceWorker, BusySourceMax:
	default:
		errs = append(errs, &ConfigError{Flag: FlagConditionalDisaggCfg, Field: FieldDecodeBusySource,
			Msg: fmt.Sprintf("is %q; valid values are router, worker, max", string(d.DecodeBusySource))})
	}
	return errors.Join(errs...)
}

// checkNonNegative rejects negative, NaN and infinite values: a threshold of +Inf would
// silently switch a rule off, and NaN would make every comparison false.
func checkNonNegative(flag, field string, v OptFloat) error {
	if !v.Set {
		return nil
	}
	if !(v.Value >= 0) || math.IsInf(v.Value, 0) {
		return &ConfigError{Flag: flag, Field: field, Msg: fmt.Sprintf("is %s; %s", fmtFloat(v.Value), validRangeNonNegative)}
	}
	return nil
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// CheckPools is the start-up check that needs the registry: conditional disaggregation
// requires separate prefill and decode pools. It reports, per model that has decode
// workers, a missing prefill pool, and a fleet with no decode pool at all. With the
// feature off it accepts anything. The caller runs it once the registry has been
// replayed, and again whenever it wants to warn about a pool that emptied.
func CheckPools(c *Config, workers []WorkerInfo) error {
	if !c.ConditionalDisagg {
		return nil
	}
	var decodeModels []string
	prefill := map[string]bool{}
	for i := range workers {
		switch workers[i].Pool {
		case PoolDecode:
			decodeModels = append(decodeModels, workers[i].Model)
		case PoolPrefill:
			prefill[workers[i].Model] = true
		}
	}
	if len(decodeModels) == 0 {
		return &ConfigError{Flag: FlagConditionalDisagg, Msg: "requires separate prefill and decode pools: no decode worker is registered"}
	}
	// Sorted, not ranged from a map, so the message is the same on every run.
	slices.Sort(decodeModels)
	var missing []string
	for _, m := range slices.Compact(decodeModels) {
		if !prefill[m] {
			missing = append(missing, strconv.Quote(m))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &ConfigError{Flag: FlagConditionalDisagg, Msg: "requires separate prefill and decode pools: no prefill worker is registered for model " +
		strings.Join(missing, ", ")}
}
