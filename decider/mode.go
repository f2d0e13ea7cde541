package decider

// decideMode applies Step 2 (the policy's rule, policy.go) and Step 3 (the decode guard) and sets Mode,
// Reason, PolicyBypass, DecidedBy and Distance. d is the chosen decode row; p is the
// prefill row the router would pick, or nil when no prefill worker is eligible.
func (dc *Decider) decideMode(dst *Decision, d, p *Candidate) {
	cfg := &dc.cfg.Disagg
	switch {
	case p == nil:
		// Local prefill is the only way, whether or not the feature is on.
		dst.Mode, dst.Reason, dst.DecidedBy = ModeLocal, ReasonAggregatedNoPrefill, CheckPrefillPool
		return
	case !dc.cfg.ConditionalDisagg:
		dst.Mode, dst.Reason, dst.DecidedBy = ModeRemote, ReasonDisabled, CheckFeatureOff
		return
	}

	// Step 2: the policy. decider is the check that settled it.
	res := dc.rule(dst, cfg, p, dc.prefillThreshold)
	bypass, decider := res.bypass, res.decider
	dst.PolicyBypass = bypass

	// Step 3: the guard, a veto on a bypass. It is evaluated even when the policy
	// declined, so that what-if tooling sees how it stood.
	guardOn := cfg.DecodeBusyThreshold.Set
	var known, busy bool
	if guardOn {
		known, busy = decodeBusy(dst, d, cfg)
	}
	switch {
	case !bypass:
		dst.Mode, dst.Reason = ModeRemote, ReasonDeclinedByPolicy
	case !guardOn:
		dst.Mode, dst.Reason = ModeLocal, ReasonAllowedGateDisabled
	case !known:
		dst.Mode, dst.Reason, decider = ModeRemote, ReasonDeniedDecodeBusyUnknown, &dst.DecodeBusy
	case busy:
		dst.Mode, dst.Reason, decider = ModeRemote, ReasonDeniedDecodeBusy, &dst.DecodeBusy
	default:
		dst.Mode, dst.Reason, decider = ModeLocal, ReasonAllowedDecodeNotBusy, &dst.DecodeBusy
	}

	switch {
	case res.emptyPrompt && decider != &dst.DecodeBusy:
		// No threshold decided: an empty prompt always bypasses.
		dst.DecidedBy = CheckEmptyPrompt
		return
	case decider == nil:
		// The policy's rule compared nothing: it settled the mode by itself.
		dst.DecidedBy = CheckPolicyRule
		return
	}
	dst.DecidedBy = decider.Name
	if decider.Known {
		dst.Distance = decider.Value - decider.Limit
	}
}
