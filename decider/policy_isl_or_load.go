package decider

// islOrLoadRule is the isl_or_load policy: either condition allows the bypass. A
// missing load sample makes the load condition false, which leaves the ISL condition
// alone, as the spec asks. The ISL check is named as the decider unless the load
// condition alone allowed the bypass.
func islOrLoadRule(dst *Decision, cfg *DisaggConfig, p *Candidate, threshold float64) ruleResult {
	isl := islCondition(dst, cfg)
	load := prefillBusy(dst, p, threshold)
	r := ruleResult{bypass: isl || load, emptyPrompt: isl && dst.PromptTokens == 0}
	if isl || !load {
		r.decider = islDecider(dst, isl)
	} else {
		r.decider = &dst.PrefillBusy
	}
	return r
}
