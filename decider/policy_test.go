package decider_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
)

// TestPolicyTableIsWellFormed: each policy has a unique name, a summary, reads only
// keys the config accepts, declares reasons, and can be built into a Decider.
func TestPolicyTableIsWellFormed(t *testing.T) {
	specs := decider.Policies()
	if len(specs) < 3 {
		t.Fatalf("%d policies; the spec has isl_bounding, prefill_load, isl_or_load", len(specs))
	}
	seen := map[decider.Policy]bool{}
	for _, s := range specs {
		if s.Name == "" || seen[s.Name] {
			t.Fatalf("policy name %q is empty or repeated", s.Name)
		}
		seen[s.Name] = true
		if s.Summary == "" || len(s.Reasons) == 0 {
			t.Errorf("%s: summary %q, reasons %v", s.Name, s.Summary, s.Reasons)
		}
		for _, f := range s.Reads {
			if f == decider.FieldPolicy {
				t.Errorf("%s reads %q, which names the policy itself", s.Name, f)
			}
			if _, err := decider.ParseDisaggConfig([]byte(`{"` + f + `":null}`)); err != nil {
				t.Errorf("%s reads %q, which the config does not accept: %v", s.Name, f, err)
			}
		}
		for _, r := range s.Reasons {
			if r == decider.ReasonAggregatedNoPrefill || r == decider.ReasonDisabled {
				t.Errorf("%s declares %s, which is settled before any policy runs", s.Name, r)
			}
		}
		if got, ok := decider.LookupPolicy(s.Name); !ok || got.Name != s.Name {
			t.Errorf("LookupPolicy(%s) = %v, %v", s.Name, got.Name, ok)
		}
		cfg := decider.DefaultConfig()
		cfg.ConditionalDisagg = true
		cfg.Disagg.Policy = s.Name
		cfg.Disagg.PrefillBusyThreshold = decider.Some(1)
		if _, err := decider.New(cfg); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
	if _, ok := decider.LookupPolicy("nope"); ok {
		t.Fatal("LookupPolicy found an unknown policy")
	}
}

// TestReasonsEnum: Reasons lists each code once, every policy's codes among them, and
// the two that no policy settles last.
func TestReasonsEnum(t *testing.T) {
	rs := decider.Reasons()
	for i, r := range rs {
		if r == "" || slices.Contains(rs[:i], r) {
			t.Fatalf("reason %q is empty or repeated in %v", r, rs)
		}
	}
	for _, s := range decider.Policies() {
		for _, r := range s.Reasons {
			if !slices.Contains(rs, r) {
				t.Errorf("%s declares %s, which Reasons leaves out", s.Name, r)
			}
		}
	}
	if n := len(rs); n < 2 || rs[n-2] != decider.ReasonAggregatedNoPrefill || rs[n-1] != decider.ReasonDisabled {
		t.Fatalf("Reasons() = %v", rs)
	}
}

// TestPolicyReasonsDeclared: a decision under each policy carries only a reason its
// table row declares (or one settled before the policy ran), so the table can be
// trusted by what reads it: the metrics' label values and the API's reason enum.
func TestPolicyReasonsDeclared(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 19))
	for _, spec := range decider.Policies() {
		produced := map[decider.Reason]int{}
		for iter := range 400 {
			f := randomFleet(rng, 1+rng.IntN(8), rng.IntN(4))
			cfg := randomConfig(rng)
			cfg.Disagg.Policy = spec.Name
			dc, err := decider.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			d, err := dc.Decide(f.view(nil), &f.req)
			if err != nil {
				continue
			}
			if d.Policy != spec.Name || d.DecidedBy == "" {
				t.Fatalf("%s iter %d: policy %q decided_by %q", spec.Name, iter, d.Policy, d.DecidedBy)
			}
			if !slices.Contains(spec.Reasons, d.Reason) && d.Reason != decider.ReasonAggregatedNoPrefill {
				t.Fatalf("%s iter %d: reason %s is not among the declared %v", spec.Name, iter, d.Reason, spec.Reasons)
			}
			produced[d.Reason]++
		}
		t.Logf("%s: %v", spec.Name, produced)
	}
}
