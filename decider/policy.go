package decider

import "slices"

// Policy is the conditional disaggregation policy (conditional-disagg.md, Step 2).
type Policy string

const (
	PolicyISLBounding Policy = "isl_bounding"
	PolicyPrefillLoad Policy = "prefill_load"
	PolicyISLOrLoad   Policy = "isl_or_load"
	PolicySLO         Policy = "slo"
)

// PolicySpec describes one policy. The table of policyTable is the one place a policy
// is declared: config validation, the flag help, `sim compare`, `tune` and the
// OpenAPI enums all read it, so that adding a policy means adding a row and its rule
// (and spec cases in testdata/spec.txt, which TestSpecCoversEveryPolicy asks for).
type PolicySpec struct {
	Name Policy
	// Summary is one line for help texts and reports: when the policy bypasses.
	Summary string
	// Reads lists the keys of --router-conditional-disagg-config the policy's rule
	// reads (the guard's keys are read under every policy). Validation requires a
	// prefill busy threshold only of a policy that reads it; tune moves only the ISL
	// thresholds of a policy that reads them.
	Reads []string
	// Reasons lists every reason code a decision under this policy can carry once the
	// policy has run; TestPolicyReasonsDeclared holds the rule to it.
	Reasons []Reason
	rule    policyRule
	// mode, when set, replaces Steps 2 and 3 as a whole: the policy decides the mode,
	// the reason and the prefill worker itself (the slo policy has its own guard).
	mode modeRule
}

// modeRule decides the mode of dst on decode row d and picked prefill row p (never
// nil), sets Mode, Reason, PolicyBypass, DecidedBy and Distance, and returns the
// prefill row a remote decision uses. It must not allocate.
type modeRule func(dc *Decider, dst *Decision, d, p *Candidate) *Candidate

// policyRule is Step 2 of a policy: whether it asks for the bypass (local prefill) of
// the request in dst, on chosen prefill row p (never nil), and which of dst's checks
// settled that. It records its checks in dst, so it must not allocate.
type policyRule func(dst *Decision, cfg *DisaggConfig, p *Candidate, prefillThreshold float64) ruleResult

// ruleResult is what a policyRule found.
type ruleResult struct {
	bypass bool
	// decider is the check of dst that settled the bypass, or nil when the rule
	// compares nothing (DecidedBy is then CheckPolicyRule).
	decider *Check
	// emptyPrompt is set when the bypass came from the rule that an empty prompt
	// always bypasses, which no threshold decided.
	emptyPrompt bool
}

// NeedsPrefillBusyThreshold reports whether config validation must find a prefill busy
// threshold for the policy: it reads one and has no fallback for it (slo has one).
func (s *PolicySpec) NeedsPrefillBusyThreshold() bool {
	return s.ReadsField(FieldPrefillBusyThreshold) && s.mode == nil
}

// ReadsField reports whether the policy reads the config key field.
func (s *PolicySpec) ReadsField(field string) bool { return slices.Contains(s.Reads, field) }

// guardReasons are the reasons a policy that can both ask for and decline the bypass
// produces: its own "no", then the decode guard's answers to its "yes".
func guardReasons() []Reason {
	return []Reason{ReasonDeclinedByPolicy, ReasonAllowedGateDisabled, ReasonAllowedDecodeNotBusy,
		ReasonDeniedDecodeBusy, ReasonDeniedDecodeBusyUnknown}
}

// policyTable lists every policy once, in the order help texts and comparisons show
// them. It is a function, not a package variable, so that no code can change the
// policies at run time.
func policyTable() []PolicySpec {
	return []PolicySpec{
		{
			Name:    PolicyISLBounding,
			Summary: "bypass iff eff < eff_isl_threshold and ratio < eff_isl_ratio_threshold (an empty prompt always bypasses)",
			Reads:   []string{FieldEffISLThreshold, FieldEffISLRatioThreshold},
			Reasons: guardReasons(),
			rule:    islBoundingRule,
		},
		{
			Name:    PolicyPrefillLoad,
			Summary: "bypass iff the prefill worker the router would pick is busy (its active prefill tokens > prefill_busy_threshold × max_num_batched_tokens)",
			Reads:   []string{FieldPrefillBusyThreshold},
			Reasons: guardReasons(),
			rule:    prefillLoadRule,
		},
		{
			Name:    PolicyISLOrLoad,
			Summary: "bypass iff isl_bounding or prefill_load would",
			Reads:   []string{FieldEffISLThreshold, FieldEffISLRatioThreshold, FieldPrefillBusyThreshold},
			Reasons: guardReasons(),
			rule:    islOrLoadRule,
		},
		{
			Name: PolicySLO,
			Summary: "bypass iff the online latency model predicts at least the goodput of remote prefill under slo_ttft_ms and slo_itl_ms " +
				"(cold: isl_or_load with the decode guard)",
			Reads: []string{FieldEffISLThreshold, FieldEffISLRatioThreshold, FieldPrefillBusyThreshold,
				FieldSLOTTFTMs, FieldSLOITLMs, FieldSLOMinSamples, FieldSLOITLGuard},
			Reasons: []Reason{ReasonSLOColdLocal, ReasonSLOColdRemote, ReasonSLOLocalBetter, ReasonSLORemoteBetter,
				ReasonSLODeniedITLGuard, ReasonSLODeniedQueueCap, ReasonSLOPrefillGuard},
			mode: sloMode,
		},
	}
}

// Policies returns every policy, in the table's order. The slice is the caller's.
func Policies() []PolicySpec { return policyTable() }

// PolicyNames returns the name of every policy, in the table's order.
func PolicyNames() []string {
	t := policyTable()
	out := make([]string, len(t))
	for i := range t {
		out[i] = string(t[i].Name)
	}
	return out
}

// LookupPolicy returns the policy named p.
func LookupPolicy(p Policy) (PolicySpec, bool) {
	for _, s := range policyTable() {
		if s.Name == p {
			return s, true
		}
	}
	return PolicySpec{}, false
}

// Reasons returns every reason code a decision can carry: those of the policies, in
// the table's order without repeats, then the two that are settled before any policy
// runs (no prefill worker, feature off). These are the values of the reason label and
// of the API's reason enum.
func Reasons() []Reason {
	var out []Reason
	for _, s := range policyTable() {
		for _, r := range s.Reasons {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return append(out, ReasonAggregatedNoPrefill, ReasonDisabled)
}
