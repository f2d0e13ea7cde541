package sim

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
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
	// Replicas runs the setup as several router replicas that see each other's
	// load late (zero: one router).
	Replicas Replicas
}

// LoadPolicyBusyThreshold is the prefill_busy_threshold the load policies are compared
// with: a prefill worker is busy when more than 2 × max_num_batched_tokens prompt
// tokens are queued on it, i.e. more than about two full steps (≈0.5 s) of work. A
// choice for the comparison, not a recommendation; `tune` should derive it.
const LoadPolicyBusyThreshold = 2.0

// CondPrefix prefixes the name of the decider policy in the setup that runs it.
const CondPrefix = "cond-"

// Policies returns the setups `sim compare` runs: aggregated, always-local on the
// disaggregated fleet, always-remote (conditional disaggregation off), and, as
// cond-NAME, each policy of the decider's table with the spec's default thresholds
// (and LoadPolicyBusyThreshold for a policy that reads a prefill busy threshold).
func Policies() []Policy {
	base := decider.DefaultConfig()
	out := []Policy{
		{Name: "aggregated", Config: base, Aggregated: true},
		{Name: "always-local", Config: base, HidePrefill: true},
		{Name: "always-remote", Config: base},
	}
	for _, spec := range decider.Policies() {
		c := base
		c.ConditionalDisagg = true
		c.Disagg.Policy = spec.Name
		if spec.NeedsPrefillBusyThreshold() {
			c.Disagg.PrefillBusyThreshold = decider.Some(LoadPolicyBusyThreshold)
		}
		out = append(out, Policy{Name: CondPrefix + string(spec.Name), Config: c})
	}
	return out
}

// PolicyNames returns the names of Policies, in order.
func PolicyNames() []string {
	ps := Policies()
	out := make([]string, len(ps))
	for i := range ps {
		out[i] = ps[i].Name
	}
	return out
}

// PolicyByName finds a policy of Policies.
func PolicyByName(name string) (Policy, error) {
	for _, p := range Policies() {
		if p.Name == name {
			return p, nil
		}
	}
	return Policy{}, fmt.Errorf("unknown policy %q; known: %s", name, strings.Join(PolicyNames(), ", "))
}

// RunOffline runs the workload on the fleet with the decider in-process under one
// policy. Deterministic: the same inputs give the same report.
func RunOffline(ctx context.Context, fc FleetConfig, w *Workload, p Policy, log *slog.Logger) (*Report, error) {
	if p.Aggregated {
		fc.Decode += fc.Prefill
		fc.Prefill = 0
	}
	lr, err := NewLocalRouter(p.Config, p.HidePrefill, WithReplicas(p.Replicas))
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
	rep, err := f.Run(ctx, w, p.Name)
	if rep != nil {
		rep.PolicySLO, _ = p.DecidesWith()
		rep.Replicas, rep.Races = lr.Replicas(), lr.Races()
	}
	return rep, err
}

// PoliciesWithReplicas is ps, each run as the replicas r, in a new slice.
func PoliciesWithReplicas(ps []Policy, r Replicas) []Policy {
	out := make([]Policy, len(ps))
	for i, p := range ps {
		p.Replicas = r
		out[i] = p
	}
	return out
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
