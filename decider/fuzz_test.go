package decider_test

import (
	"encoding/json"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
)

// FuzzParseConfig: the parser never panics; whatever it accepts is valid, and
// re-encoding an accepted config and parsing it again gives the same config.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"policy":"prefill_load","prefill_busy_threshold":0.5}`,
		`{"policy":"isl_or_load","eff_isl_threshold":0,"eff_isl_ratio_threshold":1,"decode_busy_threshold":0.9,"decode_busy_source":"max"}`,
		`{"eff_isl_ratio_threshold":1.5}`, `{"x":1}`, `{"policy":null}`, `[]`, `{"eff_isl_threshold":1e3}`, ``, `{"a":{"b":[1,2,{}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := decider.ParseDisaggConfig(data)
		if err != nil {
			if _, ok := err.(interface{ Unwrap() []error }); !ok {
				if _, ok := err.(*decider.ConfigError); !ok {
					t.Fatalf("error %T %v is not a ConfigError", err, err)
				}
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted an invalid config: %v", err)
		}
		m := map[string]any{
			"policy": cfg.Policy, "eff_isl_threshold": cfg.EffISLThreshold,
			"eff_isl_ratio_threshold": cfg.EffISLRatioThreshold, "decode_busy_source": cfg.DecodeBusySource,
		}
		if cfg.PrefillBusyThreshold.Set {
			m["prefill_busy_threshold"] = cfg.PrefillBusyThreshold.Value
		}
		if cfg.DecodeBusyThreshold.Set {
			m["decode_busy_threshold"] = cfg.DecodeBusyThreshold.Value
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		cfg2, err := decider.ParseDisaggConfig(again)
		if err != nil || cfg2 != cfg {
			t.Fatalf("round trip of %s: %+v, %v; want %+v", again, cfg2, err, cfg)
		}
	})
}
