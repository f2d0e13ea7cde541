// Package deciderflags binds the router flags of conditional-disagg.md to a pflag
// FlagSet, with a PDR_ environment variable for each, and resolves them into a validated
// decider.Config.
//
// Precedence, highest first: a flag given on the command line, then its environment
// variable, then the default. That is the order Dynamo's frontend uses (the command
// line wins, the environment is the fallback), and it lets a deployment set defaults in
// its environment that an operator can still override by hand. An environment variable
// set to the empty string counts as unset.
//
// The environment is read through a lookup function passed in by the caller
// (os.LookupEnv in production), so that tests never touch the process environment.
package deciderflags

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/pdrouter/pdrouter/decider"
)

// EnvPrefix is the prefix of every environment variable.
const EnvPrefix = "PDR_"

// noKVEvents is Dynamo's spelling of --router-kv-events=false, accepted as a hidden alias.
const noKVEvents = "no-router-kv-events"

// Names lists every flag this package registers, in the spec's order.
func Names() []string {
	return []string{
		decider.FlagRouterMode, decider.FlagKVEvents, decider.FlagConditionalDisagg,
		decider.FlagConditionalDisaggCfg, decider.FlagQueueThreshold, decider.FlagOverlapScoreCredit,
		decider.FlagPrefillLoadScale, decider.FlagTemperature, decider.FlagActiveRequestExpiry,
	}
}

// EnvName returns the environment variable of a flag: PDR_ plus the flag name in upper
// case with dashes as underscores (router-mode → PDR_ROUTER_MODE).
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Flags is a set of registered router flags.
type Flags struct {
	fs *pflag.FlagSet
}

// Register adds the router flags to fs, with the spec's defaults, and returns a handle
// to resolve them after fs.Parse. Their usage does not name the variables: the
// binary annotates every flag of every command the same way (internal/envflags).
func Register(fs *pflag.FlagSet) *Flags {
	d := decider.DefaultConfig()
	fs.String(decider.FlagRouterMode, string(d.RouterMode),
		"routing mode: kv, round-robin or random; conditional disaggregation needs kv")
	fs.Bool(decider.FlagKVEvents, d.KVEvents,
		"read KV events from the workers; false is approximate mode, which predicts the cache from the router's own decisions")
	fs.Bool(noKVEvents, false, "same as --router-kv-events=false")
	_ = fs.MarkHidden(noKVEvents)
	fs.Bool(decider.FlagConditionalDisagg, d.ConditionalDisagg,
		"prefill short effective prompts locally on the decode worker instead of on a prefill worker")
	fs.String(decider.FlagConditionalDisaggCfg, "",
		`conditional disaggregation policy as JSON, e.g. '{"policy":"isl_bounding","eff_isl_threshold":2048,"eff_isl_ratio_threshold":0.7}'; policy: one of `+
			strings.Join(decider.PolicyNames(), ", "))
	fs.Var(&optFloatValue{}, decider.FlagQueueThreshold,
		"prefill busy threshold as a fraction of max_num_batched_tokens; inherited by the load policies when their config sets none (≥ 0; default unset)")
	fs.Float64(decider.FlagOverlapScoreCredit, d.OverlapScoreCredit,
		"credit per device-cached block in the cost (≥ 0)")
	fs.Float64(decider.FlagPrefillLoadScale, d.PrefillLoadScale,
		"scale of the prefill term of the cost (≥ 0)")
	fs.Float64(decider.FlagTemperature, d.Temperature,
		"softmax temperature of worker selection; 0 picks the lowest cost (≥ 0)")
	fs.Var(&secondsValue{d: d.ActiveRequestExpiry}, decider.FlagActiveRequestExpiry,
		"event-time expiry of router-side active request accounting, as seconds or a Go duration (> 0)")
	return &Flags{fs: fs}
}

// Config resolves the flags (command line, then environment through lookupEnv, then
// defaults) into a decider.Config and validates it. Errors name the flag and, when the
// value came from the environment, the variable.
func (f *Flags) Config(lookupEnv func(string) (string, bool)) (decider.Config, error) {
	cfg := decider.DefaultConfig()
	var errs []error
	// raw returns a flag's value as text and where it came from, or ok=false for the
	// default.
	raw := func(name string) (val, source string, ok bool) {
		if fl := f.fs.Lookup(name); fl != nil && fl.Changed {
			return fl.Value.String(), "--" + name, true
		}
		if v, ok := lookupEnv(EnvName(name)); ok && v != "" {
			return v, EnvName(name), true
		}
		return "", "", false
	}
	fail := func(name, source, val, want string) {
		errs = append(errs, &decider.ConfigError{Flag: name, Msg: fmt.Sprintf("%s=%q is not %s", source, val, want)})
	}
	if v, _, ok := raw(decider.FlagRouterMode); ok {
		cfg.RouterMode = decider.RouterMode(v)
	}
	if v, src, ok := raw(decider.FlagKVEvents); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			fail(decider.FlagKVEvents, src, v, "a boolean")
		}
		cfg.KVEvents = b
	}
	if fl := f.fs.Lookup(noKVEvents); fl != nil && fl.Changed && fl.Value.String() == "true" {
		if kv := f.fs.Lookup(decider.FlagKVEvents); kv.Changed && kv.Value.String() == "true" {
			errs = append(errs, &decider.ConfigError{Flag: decider.FlagKVEvents, Msg: "--router-kv-events and --no-router-kv-events contradict each other"})
		}
		cfg.KVEvents = false
	}
	if v, src, ok := raw(decider.FlagConditionalDisagg); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			fail(decider.FlagConditionalDisagg, src, v, "a boolean")
		}
		cfg.ConditionalDisagg = b
	}
	if v, src, ok := raw(decider.FlagConditionalDisaggCfg); ok {
		d, err := decider.ParseDisaggConfig([]byte(v))
		if err != nil {
			if src != "--"+decider.FlagConditionalDisaggCfg {
				err = fmt.Errorf("from %s: %w", src, err)
			}
			errs = append(errs, err)
		}
		cfg.Disagg = d
	}
	if v, src, ok := raw(decider.FlagQueueThreshold); ok {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			fail(decider.FlagQueueThreshold, src, v, "a number")
		}
		cfg.QueueThreshold = decider.Some(x)
	}
	for _, p := range []struct {
		name string
		dst  *float64
	}{
		{decider.FlagOverlapScoreCredit, &cfg.OverlapScoreCredit},
		{decider.FlagPrefillLoadScale, &cfg.PrefillLoadScale},
		{decider.FlagTemperature, &cfg.Temperature},
	} {
		if v, src, ok := raw(p.name); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				fail(p.name, src, v, "a number")
			}
			*p.dst = x
		}
	}
	if v, src, ok := raw(decider.FlagActiveRequestExpiry); ok {
		d, err := parseSeconds(v)
		if err != nil {
			fail(decider.FlagActiveRequestExpiry, src, v, "a duration (seconds, or like 5m)")
		}
		cfg.ActiveRequestExpiry = d
	}
	if len(errs) > 0 {
		return cfg, errors.Join(errs...)
	}
	return cfg, cfg.Validate()
}

// optFloatValue is a float flag that can be unset, which a plain Float64 flag cannot
// express: "unset" makes the load policies fail at start-up instead of inheriting 0.
type optFloatValue struct{ v decider.OptFloat }

func (o *optFloatValue) String() string {
	if !o.v.Set {
		return ""
	}
	return strconv.FormatFloat(o.v.Value, 'g', -1, 64)
}

func (o *optFloatValue) Set(s string) error {
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	o.v = decider.Some(x)
	return nil
}

func (o *optFloatValue) Type() string { return "float" }

// secondsValue is a duration flag that also takes a bare number of seconds, the unit
// Dynamo's flags use.
type secondsValue struct{ d time.Duration }

func (s *secondsValue) String() string { return s.d.String() }

func (s *secondsValue) Set(v string) error {
	d, err := parseSeconds(v)
	if err != nil {
		return err
	}
	s.d = d
	return nil
}

func (s *secondsValue) Type() string { return "duration" }

func parseSeconds(v string) (time.Duration, error) {
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs != secs || secs > float64(1<<62)/float64(time.Second) || secs < -float64(1<<62)/float64(time.Second) {
			return 0, fmt.Errorf("%q seconds is out of range", v)
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (seconds, or like 5m)", v)
	}
	return d, nil
}
