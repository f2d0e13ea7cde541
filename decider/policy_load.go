package decider

// prefillBusy evaluates the load condition on the prefill worker the router would pick
// and records the check:
//
//	busy iff active_prefill_tokens(p) > prefill_busy_threshold × max_num_batched_tokens(p)
//
// active_prefill_tokens(p) is the worker's own load sample: the policy asks whether the
// worker says it is saturated, where the cost function uses the router's accounting. A
// missing sample counts as not busy, and an unknown max_num_batched_tokens is taken as
// 10,000,000, so such a worker is practically never busy. p == nil (no prefill worker)
// is never reached: the decision is then aggregated before any policy runs.
func prefillBusy(dst *Decision, p *Candidate, threshold float64) bool {
	mnbt, note := p.MaxNumBatchedTokens, ""
	if mnbt <= 0 {
		mnbt, note = UnknownMaxNumBatchedTokens, NoteMaxBatchedUnknown
	}
	c := Check{Name: CheckPrefillBusy, Evaluated: true, Known: true, Limit: threshold * float64(mnbt), Note: note}
	if !p.LoadKnown {
		c.Known, c.Note = false, NoteNoLoadSample
		dst.PrefillBusy = c
		return false
	}
	c.Value = float64(p.LoadPrefillTokens)
	c.Hit = c.Value > c.Limit
	dst.PrefillBusy = c
	return c.Hit
}

// prefillLoadRule is the prefill_load policy.
func prefillLoadRule(dst *Decision, _ *DisaggConfig, p *Candidate, threshold float64) ruleResult {
	return ruleResult{bypass: prefillBusy(dst, p, threshold), decider: &dst.PrefillBusy}
}
