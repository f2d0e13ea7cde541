package decider

// islCondition evaluates the isl_bounding rule and records both checks:
//
//	bypass iff eff < eff_isl_threshold AND ratio < eff_isl_ratio_threshold
//
// Both comparisons are strict: eff == threshold or ratio == threshold means remote.
// P == 0 always bypasses: there is nothing to send to a prefill worker, and the spec
// states it as a rule of its own, so it holds even with both thresholds at 0, where the
// strict comparisons alone would refuse.
func islCondition(dst *Decision, cfg *DisaggConfig) bool {
	eff, thr := dst.EffectiveISL, cfg.EffISLThreshold
	dst.EffISLCheck = Check{Name: CheckEffISL, Evaluated: true, Known: true,
		Value: float64(eff), Limit: float64(thr), Hit: eff < thr}
	dst.RatioCheck = Check{Name: CheckRatio, Evaluated: true, Known: true,
		Value: dst.Ratio, Limit: cfg.EffISLRatioThreshold, Hit: dst.Ratio < cfg.EffISLRatioThreshold}
	if dst.PromptTokens == 0 {
		dst.EffISLCheck.Note = NoteEmptyPrompt
		dst.RatioCheck.Note = NoteEmptyPrompt
		return true
	}
	return dst.EffISLCheck.Hit && dst.RatioCheck.Hit
}

// islDecider names the ISL check that settled the ISL condition. When it failed, that is
// the first failing check. When it passed, it is the check with the least relative slack,
// the one that would flip first as the effective ISL grows.
func islDecider(dst *Decision, passed bool) *Check {
	e, r := &dst.EffISLCheck, &dst.RatioCheck
	if !passed {
		if !e.Hit {
			return e
		}
		return r
	}
	if (r.Limit-r.Value)/r.Limit < (e.Limit-e.Value)/e.Limit {
		return r
	}
	return e
}

// islBoundingRule is the isl_bounding policy.
func islBoundingRule(dst *Decision, cfg *DisaggConfig, _ *Candidate, _ float64) ruleResult {
	ok := islCondition(dst, cfg)
	return ruleResult{bypass: ok, decider: islDecider(dst, ok), emptyPrompt: ok && dst.PromptTokens == 0}
}
