package deciderflags_test

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/decider/deciderflags"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func parse(t *testing.T, args []string, e map[string]string) (decider.Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f := deciderflags.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return f.Config(env(e))
}

func TestEveryFlagRegisteredWithEnv(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	deciderflags.Register(fs)
	want := map[string]string{
		"router-mode":                      "PDR_ROUTER_MODE",
		"router-kv-events":                 "PDR_ROUTER_KV_EVENTS",
		"router-conditional-disagg":        "PDR_ROUTER_CONDITIONAL_DISAGG",
		"router-conditional-disagg-config": "PDR_ROUTER_CONDITIONAL_DISAGG_CONFIG",
		"router-queue-threshold":           "PDR_ROUTER_QUEUE_THRESHOLD",
		"router-kv-overlap-score-credit":   "PDR_ROUTER_KV_OVERLAP_SCORE_CREDIT",
		"router-prefill-load-scale":        "PDR_ROUTER_PREFILL_LOAD_SCALE",
		"router-temperature":               "PDR_ROUTER_TEMPERATURE",
		"router-active-request-expiry":     "PDR_ROUTER_ACTIVE_REQUEST_EXPIRY",
	}
	if len(deciderflags.Names()) != len(want) {
		t.Fatalf("Names() = %v", deciderflags.Names())
	}
	for _, name := range deciderflags.Names() {
		fl := fs.Lookup(name)
		if fl == nil {
			t.Fatalf("--%s not registered", name)
		}
		if got := deciderflags.EnvName(name); got != want[name] {
			t.Errorf("env of --%s = %s, want %s", name, got, want[name])
		}
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := parse(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg != decider.DefaultConfig() {
		t.Fatalf("defaults %+v", cfg)
	}
}

// Precedence: flag > environment > default, for every flag.
func TestEnvOverridesDefaultsAndFlagsOverrideEnv(t *testing.T) {
	e := map[string]string{
		"PDR_ROUTER_MODE":                      "round-robin",
		"PDR_ROUTER_KV_EVENTS":                 "false",
		"PDR_ROUTER_CONDITIONAL_DISAGG":        "false",
		"PDR_ROUTER_CONDITIONAL_DISAGG_CONFIG": `{"eff_isl_threshold":1000}`,
		"PDR_ROUTER_QUEUE_THRESHOLD":           "0.5",
		"PDR_ROUTER_KV_OVERLAP_SCORE_CREDIT":   "0.5",
		"PDR_ROUTER_PREFILL_LOAD_SCALE":        "2",
		"PDR_ROUTER_TEMPERATURE":               "0.3",
		"PDR_ROUTER_ACTIVE_REQUEST_EXPIRY":     "60",
	}
	cfg, err := parse(t, nil, e)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RouterMode != "round-robin" || cfg.KVEvents || cfg.Disagg.EffISLThreshold != 1000 ||
		cfg.QueueThreshold != decider.Some(0.5) || cfg.OverlapScoreCredit != 0.5 || cfg.PrefillLoadScale != 2 ||
		cfg.Temperature != 0.3 || cfg.ActiveRequestExpiry != time.Minute {
		t.Fatalf("env not applied: %+v", cfg)
	}
	cfg, err = parse(t, []string{
		"--router-mode", "kv", "--router-kv-events=true", "--router-conditional-disagg",
		"--router-conditional-disagg-config", `{"policy":"prefill_load","prefill_busy_threshold":0.9}`,
		"--router-queue-threshold", "0.25", "--router-kv-overlap-score-credit", "1",
		"--router-prefill-load-scale", "1.5", "--router-temperature", "0", "--router-active-request-expiry", "2m",
	}, e)
	if err != nil {
		t.Fatal(err)
	}
	want := decider.DefaultConfig()
	want.ConditionalDisagg = true
	want.Disagg.Policy = decider.PolicyPrefillLoad
	want.Disagg.PrefillBusyThreshold = decider.Some(0.9)
	want.QueueThreshold = decider.Some(0.25)
	want.PrefillLoadScale = 1.5
	want.ActiveRequestExpiry = 2 * time.Minute
	if cfg != want {
		t.Fatalf("flags did not override env:\n got %+v\nwant %+v", cfg, want)
	}
}

func TestEmptyEnvIsUnset(t *testing.T) {
	cfg, err := parse(t, nil, map[string]string{"PDR_ROUTER_QUEUE_THRESHOLD": "", "PDR_ROUTER_MODE": ""})
	if err != nil || cfg.QueueThreshold.Set || cfg.RouterMode != decider.RouterModeKV {
		t.Fatalf("%+v %v", cfg, err)
	}
}

func TestErrorsNameTheSource(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, map[string]string{"PDR_ROUTER_TEMPERATURE": "hot"}, `--router-temperature: PDR_ROUTER_TEMPERATURE="hot" is not a number`},
		{nil, map[string]string{"PDR_ROUTER_KV_EVENTS": "maybe"}, `PDR_ROUTER_KV_EVENTS="maybe" is not a boolean`},
		{nil, map[string]string{"PDR_ROUTER_CONDITIONAL_DISAGG_CONFIG": `{"bogus":1}`},
			`from PDR_ROUTER_CONDITIONAL_DISAGG_CONFIG: --router-conditional-disagg-config: has unknown key "bogus"`},
		{[]string{"--router-conditional-disagg-config", `{"eff_isl_ratio_threshold":2}`}, nil,
			"--router-conditional-disagg-config: eff_isl_ratio_threshold is 2; valid range is [0.0, 1.0]"},
		{[]string{"--router-conditional-disagg", "--router-mode", "random"}, nil, "--router-conditional-disagg: requires KV-aware mode"},
		{[]string{"--router-conditional-disagg", "--router-kv-events=false"}, nil, "requires KV events from the workers"},
		{[]string{"--router-conditional-disagg", "--no-router-kv-events"}, nil, "requires KV events from the workers"},
		{[]string{"--router-conditional-disagg-config", `{"policy":"isl_or_load"}`}, nil, "prefill_busy_threshold is unset and --router-queue-threshold is unset"},
		{[]string{"--router-temperature", "-1"}, nil, "--router-temperature: is -1; valid range is [0, +Inf)"},
		{nil, map[string]string{"PDR_ROUTER_ACTIVE_REQUEST_EXPIRY": "soon"}, `PDR_ROUTER_ACTIVE_REQUEST_EXPIRY="soon" is not a duration`},
		{[]string{"--router-kv-events=true", "--no-router-kv-events"}, nil, "contradict"},
	} {
		_, err := parse(t, tc.args, tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: got %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestQueueThresholdInheritedFromEnv(t *testing.T) {
	cfg, err := parse(t, []string{"--router-conditional-disagg", "--router-conditional-disagg-config", `{"policy":"prefill_load"}`},
		map[string]string{"PDR_ROUTER_QUEUE_THRESHOLD": "0.7"})
	if err != nil {
		t.Fatal(err)
	}
	if thr, ok := cfg.PrefillBusyThreshold(); !ok || thr != 0.7 {
		t.Fatalf("threshold %v %v", thr, ok)
	}
}

func TestBadCommandLineValueFailsParse(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	deciderflags.Register(fs)
	if err := fs.Parse([]string{"--router-queue-threshold", "lots"}); err == nil {
		t.Fatal("accepted a non-number queue threshold")
	}
}

// TestConfigFlagHelpListsEveryPolicy: the help of --router-conditional-disagg-config
// names every policy of the decider's table, so `serve --help` is never behind it.
func TestConfigFlagHelpListsEveryPolicy(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	deciderflags.Register(fs)
	usage := fs.Lookup(decider.FlagConditionalDisaggCfg).Usage
	want := "policy: one of " + strings.Join(decider.PolicyNames(), ", ")
	if !strings.Contains(usage, want) {
		t.Fatalf("usage %q does not contain %q", usage, want)
	}
}
