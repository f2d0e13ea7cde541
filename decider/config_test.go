package decider_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/decider"
)

func TestParseDisaggConfigDefaults(t *testing.T) {
	got, err := decider.ParseDisaggConfig([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	want := decider.DisaggConfig{Policy: "isl_bounding", EffISLThreshold: 2048, EffISLRatioThreshold: 0.7, DecodeBusySource: "router",
		SLOTTFTMs: 2000, SLOITLMs: 50, SLOMinSamples: 50, SLOITLGuard: true}
	if got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
}

func TestParseDisaggConfigAllFields(t *testing.T) {
	got, err := decider.ParseDisaggConfig([]byte(`{"policy":"isl_or_load","eff_isl_threshold":4096,
		"eff_isl_ratio_threshold":0.5,"prefill_busy_threshold":0.8,"decode_busy_threshold":0.95,"decode_busy_source":"max",
		"slo_ttft_ms":1500,"slo_itl_ms":40,"slo_min_samples":7,"slo_itl_guard":false}`))
	if err != nil {
		t.Fatal(err)
	}
	want := decider.DisaggConfig{Policy: "isl_or_load", EffISLThreshold: 4096, EffISLRatioThreshold: 0.5,
		PrefillBusyThreshold: decider.Some(0.8), DecodeBusyThreshold: decider.Some(0.95), DecodeBusySource: "max",
		SLOTTFTMs: 1500, SLOITLMs: 40, SLOMinSamples: 7}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestParseDisaggConfigNullMeansDefault(t *testing.T) {
	got, err := decider.ParseDisaggConfig([]byte(`{"policy":null,"decode_busy_threshold":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Policy != decider.PolicyISLBounding || got.DecodeBusyThreshold.Set {
		t.Fatalf("got %+v", got)
	}
}

// Every rejected input names the flag, the field where there is one, and the valid
// range or values.
func TestParseDisaggConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, json, wantField, wantMsg string }{
		{"unknown_key", `{"polcy":"isl_bounding"}`, "", `unknown key "polcy"; valid keys are policy, eff_isl_threshold`},
		{"unknown_key_case_variant", `{"Policy":"isl_bounding"}`, "", `unknown key "Policy"`},
		{"duplicate_key", `{"policy":"isl_bounding","policy":"prefill_load"}`, "policy", "appears twice"},
		{"ratio_above_one", `{"eff_isl_ratio_threshold":1.5}`, "eff_isl_ratio_threshold", "is 1.5; valid range is [0.0, 1.0]"},
		{"ratio_negative", `{"eff_isl_ratio_threshold":-0.1}`, "eff_isl_ratio_threshold", "valid range is [0.0, 1.0]"},
		{"eff_negative", `{"eff_isl_threshold":-1}`, "eff_isl_threshold", "is -1; valid range is integers in [0, 9223372036854775807]"},
		{"eff_fraction", `{"eff_isl_threshold":2048.5}`, "eff_isl_threshold", "valid range is integers"},
		{"eff_string", `{"eff_isl_threshold":"2048"}`, "eff_isl_threshold", "must be a number"},
		{"eff_too_big", `{"eff_isl_threshold":99999999999999999999}`, "eff_isl_threshold", "valid range"},
		{"prefill_negative", `{"prefill_busy_threshold":-0.5}`, "prefill_busy_threshold", "valid range is [0, +Inf)"},
		{"decode_negative", `{"decode_busy_threshold":-2}`, "decode_busy_threshold", "valid range is [0, +Inf)"},
		{"decode_overflow", `{"decode_busy_threshold":1e999}`, "decode_busy_threshold", "not a finite number"},
		{"bad_policy", `{"policy":"always_local"}`, "policy", "valid values are isl_bounding, prefill_load, isl_or_load"},
		{"bad_source", `{"decode_busy_source":"gpu"}`, "decode_busy_source", "valid values are router, worker, max"},
		{"policy_not_string", `{"policy":3}`, "policy", "must be a string"},
		{"not_an_object", `[1]`, "", "must be a JSON object"},
		{"empty", ``, "", "not valid JSON"},
		{"trailing_data", `{} {}`, "", "data after the JSON object"},
		{"truncated", `{"policy":`, "policy", "has no valid JSON value"},
		{"truncated_object", `{"policy":"prefill_load"`, "", "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decider.ParseDisaggConfig([]byte(tc.json))
			if err == nil {
				t.Fatal("accepted")
			}
			var ce *decider.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("%T %v is not a ConfigError", err, err)
			}
			if ce.Flag != "router-conditional-disagg-config" || ce.Field != tc.wantField {
				t.Fatalf("flag %q field %q, want field %q", ce.Flag, ce.Field, tc.wantField)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "--router-conditional-disagg-config: ") || !strings.Contains(msg, tc.wantMsg) {
				t.Fatalf("message %q does not contain %q", msg, tc.wantMsg)
			}
		})
	}
}

// TestValidateLoadPolicyNeedsThreshold: a policy that reads prefill_busy_threshold
// needs one, set or inherited from --router-queue-threshold; any other policy does not,
// nor does slo, which reads it only for its cold start and has a fallback.
func TestValidateLoadPolicyNeedsThreshold(t *testing.T) {
	loads := 0
	for _, spec := range decider.Policies() {
		cfg := decider.DefaultConfig()
		cfg.Disagg.Policy = spec.Name
		err := cfg.Validate()
		if !spec.NeedsPrefillBusyThreshold() {
			if err != nil {
				t.Fatalf("%s reads no prefill busy threshold but is refused without one: %v", spec.Name, err)
			}
			continue
		}
		loads++
		if err == nil || !strings.Contains(err.Error(), "prefill_busy_threshold is unset and --router-queue-threshold is unset") {
			t.Fatalf("%s: %v", spec.Name, err)
		}
		cfg.QueueThreshold = decider.Some(0.8) // inherited
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s with queue threshold: %v", spec.Name, err)
		}
		if thr, ok := cfg.PrefillBusyThreshold(); !ok || thr != 0.8 {
			t.Fatalf("inherited %v %v", thr, ok)
		}
	}
	if loads < 2 {
		t.Fatalf("%d policies read prefill_busy_threshold; prefill_load and isl_or_load do", loads)
	}
}

// TestValidatePolicyNamesTheTable: every policy of the table is accepted by name, and
// an unknown one is refused with a message that lists every policy of the table.
func TestValidatePolicyNamesTheTable(t *testing.T) {
	for _, name := range decider.PolicyNames() {
		if _, err := decider.ParseDisaggConfig([]byte(`{"policy":"` + name + `","prefill_busy_threshold":1}`)); err != nil {
			t.Errorf("policy %s: %v", name, err)
		}
	}
	_, err := decider.ParseDisaggConfig([]byte(`{"policy":"nope"}`))
	want := `policy is "nope"; valid values are ` + strings.Join(decider.PolicyNames(), ", ")
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want a message containing %q", err, want)
	}
}

func TestValidateFeatureRequirements(t *testing.T) {
	cfg := decider.DefaultConfig()
	cfg.ConditionalDisagg = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("kv mode with events: %v", err)
	}
	cfg.RouterMode = decider.RouterModeRoundRobin
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "--router-conditional-disagg: requires KV-aware mode (--router-mode kv") {
		t.Fatalf("without kv mode: %v", err)
	}
	cfg.RouterMode = decider.RouterModeKV
	cfg.KVEvents = false
	err = cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "requires KV events from the workers (--router-kv-events") {
		t.Fatalf("without kv events: %v", err)
	}
	cfg.RouterMode = decider.RouterModeRandom
	err = cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "KV-aware mode") || !strings.Contains(err.Error(), "KV events") {
		t.Fatalf("both missing must name both: %v", err)
	}
	cfg.ConditionalDisagg = false // approximate mode without the feature is fine
	cfg.RouterMode = decider.RouterModeKV
	if err := cfg.Validate(); err != nil || !cfg.Approximate() {
		t.Fatalf("approximate mode: %v", err)
	}
}

func TestValidateRanges(t *testing.T) {
	for name, mutate := range map[string]func(*decider.Config){
		"router-mode":                    func(c *decider.Config) { c.RouterMode = "kv-ish" },
		"router-queue-threshold":         func(c *decider.Config) { c.QueueThreshold = decider.Some(-1) },
		"router-kv-overlap-score-credit": func(c *decider.Config) { c.OverlapScoreCredit = -0.1 },
		"router-prefill-load-scale":      func(c *decider.Config) { c.PrefillLoadScale = -1 },
		"router-temperature":             func(c *decider.Config) { c.Temperature = -1 },
		"router-active-request-expiry":   func(c *decider.Config) { c.ActiveRequestExpiry = 0 },
	} {
		cfg := decider.DefaultConfig()
		mutate(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "--"+name+": ") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestCheckPools(t *testing.T) {
	cfg := decider.DefaultConfig()
	cfg.ConditionalDisagg = true
	dec := decider.WorkerInfo{ID: "d", Pool: decider.PoolDecode, Model: "a"}
	pre := decider.WorkerInfo{ID: "p", Pool: decider.PoolPrefill, Model: "a"}
	if err := decider.CheckPools(&cfg, []decider.WorkerInfo{dec, pre}); err != nil {
		t.Fatal(err)
	}
	err := decider.CheckPools(&cfg, []decider.WorkerInfo{dec, {ID: "d2", Pool: decider.PoolDecode, Model: "b"}, pre})
	if err == nil || !strings.Contains(err.Error(), `requires separate prefill and decode pools: no prefill worker is registered for model "b"`) {
		t.Fatalf("missing prefill pool: %v", err)
	}
	err = decider.CheckPools(&cfg, []decider.WorkerInfo{pre})
	if err == nil || !strings.Contains(err.Error(), "no decode worker is registered") {
		t.Fatalf("missing decode pool: %v", err)
	}
	cfg.ConditionalDisagg = false
	if err := decider.CheckPools(&cfg, nil); err != nil {
		t.Fatalf("feature off: %v", err)
	}
}

func TestConfigHash(t *testing.T) {
	a := decider.DefaultConfig()
	b := decider.DefaultConfig()
	if a.Hash() != b.Hash() || len(a.Hash()) != 16 {
		t.Fatalf("hash %q %q", a.Hash(), b.Hash())
	}
	// Golden: the canonical encoding and hash are a contract with recorded decisions.
	const wantJSON = `{"active_request_expiry_ns":300000000000,"conditional_disagg":false,"decode_busy_source":"router",` +
		`"decode_busy_threshold":null,"eff_isl_ratio_threshold":0.7,"eff_isl_threshold":2048,"kv_events":true,` +
		`"overlap_score_credit":1,"policy":"isl_bounding","prefill_busy_threshold":null,"prefill_load_scale":1,` +
		`"queue_threshold":null,"router_mode":"kv","temperature":0,"v":1}`
	if got := string(a.CanonicalJSON()); got != wantJSON {
		t.Fatalf("canonical JSON\n got %s\nwant %s", got, wantJSON)
	}
	seen := map[string]string{a.Hash(): "default"}
	for name, mutate := range map[string]func(*decider.Config){
		"feature":   func(c *decider.Config) { c.ConditionalDisagg = true },
		"threshold": func(c *decider.Config) { c.Disagg.EffISLThreshold = 2049 },
		"ratio":     func(c *decider.Config) { c.Disagg.EffISLRatioThreshold = 0.70000001 },
		"guard":     func(c *decider.Config) { c.Disagg.DecodeBusyThreshold = decider.Some(0) },
		"queue":     func(c *decider.Config) { c.QueueThreshold = decider.Some(0) },
		"expiry":    func(c *decider.Config) { c.ActiveRequestExpiry = time.Minute },
		"temp":      func(c *decider.Config) { c.Temperature = 1e-9 },
		"source":    func(c *decider.Config) { c.Disagg.DecodeBusySource = decider.BusySourceMax },
	} {
		c := decider.DefaultConfig()
		mutate(&c)
		if prev, dup := seen[c.Hash()]; dup {
			t.Errorf("%s hashes like %s", name, prev)
		}
		seen[c.Hash()] = name
	}
}
