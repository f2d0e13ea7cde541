package sim

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/pdrouter/pdrouter/decider"
)

// Policy is one routing setup to compare.
type Policy struct {
	Name   string
	Config decider.Config
	// HidePrefill keeps the prefill workers out of the router's view: every request
	// is prefilled on its decode worker while the prefill GPUs idle.
	HidePrefill bool
	// Aggregated turns every worker of the fleet into a decode worker (same GPU
	// count, no prefill pool): classic aggregated serving with KV-aware routing.
	Aggregated bool
}

// LoadPolicyBusyThreshold is the prefill_busy_threshold the load policies are compared
// with: a prefill worker is busy when more than 2 × max_num_batched_tokens prompt
// tokens are queued on it, i.e. more than about two full steps (≈0.5 s) of work. A
// choice for the comparison, not a recommendation; `tune` should derive it.
const LoadPolicyBusyThreshold = 2.0

// Policies returns the setups `sim compare` runs: aggregated, always-local on the
// disaggregated fleet, always-remote (conditional disaggregation off), and each
// conditional policy with the spec's default thresholds.
func Policies() []Policy {
	base := decider.DefaultConfig()
	cond := func(p decider.Policy) decider.Config {
		c := base
		c.ConditionalDisagg = true
		c.Disagg.Policy = p
		if p != decider.PolicyISLBounding {
			c.Disagg.PrefillBusyThreshold = decider.Some(LoadPolicyBusyThreshold)
		}
		return c
	}
	return []Policy{
		{Name: "aggregated", Config: base, Aggregated: true},
		{Name: "always-local", Config: base, HidePrefill: true},
		{Name: "always-remote", Config: base},
		{Name: "cond-isl_bounding", Config: cond(decider.PolicyISLBounding)},
		{Name: "cond-prefill_load", Config: cond(decider.PolicyPrefillLoad)},
		{Name: "cond-isl_or_load", Config: cond(decider.PolicyISLOrLoad)},
	}
}

// PolicyByName finds a policy of Policies.
func PolicyByName(name string) (Policy, error) {
	for _, p := range Policies() {
		if p.Name == name {
			return p, nil
		}
	}
	return Policy{}, fmt.Errorf("unknown policy %q; known: aggregated, always-local, always-remote, cond-isl_bounding, cond-prefill_load, cond-isl_or_load", name)
}

// RunOffline runs the workload on the fleet with the decider in-process under one
// policy. Deterministic: the same inputs give the same report.
func RunOffline(ctx context.Context, fc FleetConfig, w *Workload, p Policy, log *slog.Logger) (*Report, error) {
	if p.Aggregated {
		fc.Decode += fc.Prefill
		fc.Prefill = 0
	}
	lr, err := NewLocalRouter(p.Config, p.HidePrefill)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	f, err := NewFleet(fc, lr, log)
	if err != nil {
		return nil, err
	}
	if log != nil {
		f.progress = 5 * time.Second
	}
	return f.Run(ctx, w, p.Name)
}

// Compare runs every policy on the same fleet and workload, one after the other.
func Compare(ctx context.Context, fc FleetConfig, w *Workload, ps []Policy, log *slog.Logger) ([]*Report, error) {
	var out []*Report
	for _, p := range ps {
		rep, err := RunOffline(ctx, fc, w, p, log)
		if err != nil {
			return out, err
		}
		out = append(out, rep)
	}
	return out, nil
}
