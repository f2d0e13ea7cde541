package replay

import (
	"fmt"
	"math"
	"strings"

	"github.com/pdrouter/pdrouter/decider"
)

// Selection explains the worker choice in one pool: who won, who came
// second and by how much. The margin is what an operator needs to judge a
// decision: a worker that won by 0.01 blocks of cost is a coin toss that
// any change of load flips; one that won by 500 is not.
type Selection struct {
	Pool     string `json:"pool"`
	Eligible int    `json:"eligible"`
	// Picked is the worker the decider chose (empty when none was eligible).
	Picked     string  `json:"picked"`
	PickedCost float64 `json:"picked_cost"`
	// RunnerUp is the best eligible worker after Picked by the decider's own
	// order (cost, then tie hash, then id); empty when Picked was alone.
	RunnerUp     string  `json:"runner_up,omitempty"`
	RunnerUpCost float64 `json:"runner_up_cost,omitempty"`
	// Margin = RunnerUpCost − PickedCost, in cost units (blocks).
	Margin float64 `json:"margin,omitempty"`
	// TieBreak: the two costs were exactly equal and the tie hash settled it.
	TieBreak bool `json:"tie_break,omitempty"`
	// Temperature > 0 means the pick was a seeded softmax draw, not the
	// minimum; PickedProbability is the chosen worker's probability.
	Temperature       float64 `json:"temperature,omitempty"`
	PickedProbability float64 `json:"picked_probability,omitempty"`
	Summary           string  `json:"summary"`
}

// selectionOf summarizes the rows of one pool of a decision.
func selectionOf(d *decider.Decision, pool decider.Pool, temperature float64) Selection {
	s := Selection{Pool: string(pool)}
	var picked, runner *decider.Candidate
	for i := range d.Candidates {
		c := &d.Candidates[i]
		if c.Pool != pool || !c.Eligible {
			continue
		}
		s.Eligible++
		if c.Picked && picked == nil {
			picked = c
		}
	}
	if picked == nil {
		s.Summary = fmt.Sprintf("no eligible %s worker", pool)
		return s
	}
	for i := range d.Candidates {
		c := &d.Candidates[i]
		if c.Pool != pool || !c.Eligible || c == picked {
			continue
		}
		if runner == nil || before(c, runner) {
			runner = c
		}
	}
	s.Picked, s.PickedCost = picked.Worker, picked.Cost
	if temperature > 0 {
		s.Temperature, s.PickedProbability = temperature, picked.Probability
	}
	if runner == nil {
		s.Summary = fmt.Sprintf("%s was the only eligible %s worker", picked.Worker, pool)
		return s
	}
	s.RunnerUp, s.RunnerUpCost, s.Margin = runner.Worker, runner.Cost, runner.Cost-picked.Cost
	s.TieBreak = runner.Cost == picked.Cost
	switch {
	case temperature > 0:
		s.Summary = fmt.Sprintf("%s drawn with probability %.3g at temperature %g (cost %s; lowest other: %s at %s)",
			picked.Worker, picked.Probability, temperature, num(picked.Cost), runner.Worker, num(runner.Cost))
	case s.TieBreak:
		s.Summary = fmt.Sprintf("%s and %s tied at cost %s; the tie hash of (request id, worker id) chose %s",
			picked.Worker, runner.Worker, num(picked.Cost), picked.Worker)
	default:
		s.Summary = fmt.Sprintf("%s at cost %s beat runner-up %s at %s by %s", picked.Worker, num(picked.Cost),
			runner.Worker, num(runner.Cost), num(s.Margin))
	}
	return s
}

// before is the decider's order of preference at temperature 0.
func before(a, b *decider.Candidate) bool {
	if a.Cost != b.Cost {
		return a.Cost < b.Cost
	}
	if a.TieHash != b.TieHash {
		return a.TieHash < b.TieHash
	}
	return strings.Compare(a.Worker, b.Worker) < 0
}

// ModeDecision explains local versus remote: the rule that settled it, its
// two sides, and how far the value was from flipping it.
type ModeDecision struct {
	Mode         string `json:"mode"`
	Reason       string `json:"reason"`
	PolicyBypass bool   `json:"policy_bypass"`
	// DecidedBy is the decider's CheckName of the settling rule.
	DecidedBy string `json:"decided_by"`
	// Rule states the comparison, e.g. "effective_isl < eff_isl_threshold".
	Rule string `json:"rule"`
	// Value and Limit are the rule's two sides; Distance = Value − Limit,
	// in the rule's unit. Known is false when an input was missing and the
	// spec's rule for it decided (Value, Limit, Distance are then 0).
	Value    float64 `json:"value"`
	Limit    float64 `json:"limit"`
	Distance float64 `json:"distance"`
	Known    bool    `json:"known"`
	Summary  string  `json:"summary"`
	// Checks are all four checks as recorded, evaluated or not.
	Checks []decider.Check `json:"checks"`
	// SLO is the slo policy's predictions, SLOs and margin (absent under other
	// policies).
	SLO *decider.SLOPrediction `json:"slo,omitempty"`
}

// modeOf explains the mode of a decision.
func modeOf(d *decider.Decision) ModeDecision {
	m := ModeDecision{Mode: string(d.Mode), Reason: string(d.Reason), PolicyBypass: d.PolicyBypass,
		DecidedBy: string(d.DecidedBy), Distance: d.Distance,
		Checks: []decider.Check{d.EffISLCheck, d.RatioCheck, d.PrefillBusy, d.DecodeBusy}}
	var c *decider.Check
	switch d.DecidedBy {
	case decider.CheckEffISL:
		c, m.Rule = &d.EffISLCheck, "effective_isl < eff_isl_threshold allows local prefill"
	case decider.CheckRatio:
		c, m.Rule = &d.RatioCheck, "effective_isl_ratio < eff_isl_ratio_threshold allows local prefill"
	case decider.CheckPrefillBusy:
		c, m.Rule = &d.PrefillBusy, "prefill worker's active tokens > prefill_busy_threshold × max_num_batched_tokens allows local prefill"
	case decider.CheckDecodeBusy:
		c, m.Rule = &d.DecodeBusy, "decode blocks > decode_busy_threshold × total_kv_blocks vetoes local prefill"
	case decider.CheckPrefillPool:
		m.Rule = "no eligible prefill worker: local prefill"
		m.Summary = "no eligible prefill worker for the model, so the request is prefilled on its decode worker (aggregated)"
	case decider.CheckFeatureOff:
		m.Rule = "conditional disaggregation off: remote prefill"
		m.Summary = "conditional disaggregation is off, so every request with a prefill worker prefills remotely"
	case decider.CheckEmptyPrompt:
		m.Rule = "prompt_tokens == 0 always bypasses"
		m.Summary = "the prompt is empty, which always bypasses remote prefill"
	case decider.CheckSLOGoodput:
		m.Rule = "local prefill iff its expected goodput > remote's + " + num(decider.SLOTieMargin) + ", ties remote (both missing: the smaller miss)"
		m.Summary = sloSummary(&d.SLO)
	case decider.CheckSLOITLGuard:
		m.Rule = "local prefill vetoed when it pushes the running requests' predicted ITL past slo_itl_ms"
		m.Summary = sloSummary(&d.SLO)
	case decider.CheckSLOQueueCap:
		m.Rule = fmt.Sprintf("where local prefills are under %s of the model's samples, local prefill vetoed when the decode worker's "+
			"queued prompt tokens and this prompt take more than %s × slo_ttft_ms to prefill", num(decider.SLOQueueCapLocalShare), num(decider.SLOQueueCapFraction))
		m.Summary = fmt.Sprintf("the decode worker's local prefill queue would take %s ms to prefill, %s ms past the cap: remote prefill; %s",
			num(d.Distance+decider.SLOQueueCapFraction*d.SLO.TTFTLimitMs), num(d.Distance), sloSummary(&d.SLO))
	case decider.CheckPolicyRule:
		m.Rule = "policy " + string(d.Policy) + " compares no threshold"
		m.Summary = fmt.Sprintf("policy %s settled the mode by its rule alone: %s", d.Policy, d.Reason)
	}
	if d.SLO.Evaluated {
		s := d.SLO
		m.SLO = &s
		if d.DecidedBy == decider.CheckSLOGoodput || d.DecidedBy == decider.CheckSLOITLGuard {
			m.Value, m.Limit, m.Known = s.LocalGoodput, s.RemoteGoodput, true
			if d.DecidedBy == decider.CheckSLOITLGuard {
				m.Value, m.Limit = s.OthersITLMs, s.ITLLimitMs
			}
		}
		if d.DecidedBy == decider.CheckSLOQueueCap {
			m.Limit = decider.SLOQueueCapFraction * s.TTFTLimitMs
			m.Value, m.Known = d.Distance+m.Limit, true
		}
	}
	if c == nil {
		if m.Summary == "" {
			m.Summary = fmt.Sprintf("decided by %s", d.DecidedBy)
		}
		return m
	}
	m.Value, m.Limit, m.Known = c.Value, c.Limit, c.Known
	if !c.Known {
		m.Value, m.Limit = 0, 0
		m.Summary = fmt.Sprintf("%s could not be evaluated (%s), and the spec's rule for the missing input decided: %s", c.Name, c.Note, d.Reason)
		return m
	}
	gap := math.Abs(c.Value - c.Limit)
	switch d.DecidedBy {
	case decider.CheckEffISL:
		if c.Hit {
			m.Summary = fmt.Sprintf("effective ISL %s < eff_isl_threshold %s: %s tokens of headroom before it would go remote", num(c.Value), num(c.Limit), num(gap))
		} else {
			m.Summary = fmt.Sprintf("effective ISL %s ≥ eff_isl_threshold %s by %s tokens: remote prefill", num(c.Value), num(c.Limit), num(gap))
		}
	case decider.CheckRatio:
		if c.Hit {
			m.Summary = fmt.Sprintf("effective ISL ratio %.4g < eff_isl_ratio_threshold %g: %.4g of headroom before it would go remote", c.Value, c.Limit, gap)
		} else {
			m.Summary = fmt.Sprintf("effective ISL ratio %.4g ≥ eff_isl_ratio_threshold %g by %.4g: remote prefill", c.Value, c.Limit, gap)
		}
	case decider.CheckPrefillBusy:
		if c.Hit {
			m.Summary = fmt.Sprintf("the prefill worker reports %s tokens in flight > limit %s (busy) by %s: local prefill", num(c.Value), num(c.Limit), num(gap))
		} else {
			m.Summary = fmt.Sprintf("the prefill worker reports %s tokens in flight ≤ limit %s (not busy), %s below: remote prefill", num(c.Value), num(c.Limit), num(gap))
		}
	case decider.CheckDecodeBusy:
		if c.Hit {
			m.Summary = fmt.Sprintf("decode guard: %s blocks > limit %s by %s: the decode worker is busy, local prefill denied", num(c.Value), num(c.Limit), num(gap))
		} else {
			m.Summary = fmt.Sprintf("decode guard: %s blocks ≤ limit %s (%s of headroom): local prefill allowed", num(c.Value), num(c.Limit), num(gap))
		}
	}
	return m
}

// num prints a float with the fewest digits that keep it exact, as the
// canonical encodings do.
func num(f float64) string { return strings.TrimSuffix(fmt.Sprintf("%.10g", f), ".0") }

// sloSummary states the slo policy's predictions in one line.
func sloSummary(s *decider.SLOPrediction) string {
	return fmt.Sprintf("predicted local TTFT %s ms, ITL %s ms (goodput %.3f) against remote TTFT %s ms, ITL %s ms (goodput %.3f) "+
		"under SLOs TTFT ≤ %s ms, ITL ≤ %s ms; margin %.3f; the %d running requests' ITL %s → %s ms with a local prefill, "+
		"and the next request's remote TTFT %s ms, ITL %s ms; %s ms of remote's TTFT from the decode worker%s",
		num(s.LocalTTFTMs), num(s.LocalITLMs), s.LocalGoodput, num(s.RemoteTTFTMs), num(s.RemoteITLMs), s.RemoteGoodput,
		num(s.TTFTLimitMs), num(s.ITLLimitMs), s.Margin, s.RunningRequests, num(s.OthersBaseITLMs), num(s.OthersITLMs),
		num(s.NextTTFTMs), num(s.NextITLMs), num(s.RemoteDecodeTTFTMs), delaySummary(s))
}

// delaySummary states the delay charges, when the decision had them (decider version
// 3 on, a warm model).
func delaySummary(s *decider.SLOPrediction) string {
	if s.LocalDelayCharge == 0 && s.RemoteDelayCharge == 0 && s.TypicalTTFTMs == 0 {
		return ""
	}
	return fmt.Sprintf("; delay charges on a typical request of %s ms: local %.3f, remote %.3f",
		num(s.TypicalTTFTMs), s.LocalDelayCharge, s.RemoteDelayCharge)
}
