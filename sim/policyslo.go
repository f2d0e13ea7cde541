package sim

import (
	"fmt"
	"time"

	"github.com/pdrouter/pdrouter/decider"
)

// A policy that reads an SLO of its own (cond-slo: slo_ttft_ms and slo_itl_ms)
// decides differently under a tighter service level, so a comparison scored at the
// user's SLO must also let the policy decide at it; otherwise it would score, at
// 1000/25, a policy that aimed at the default 2000/50. The static policies read no
// SLO, and their runs do not change.

// ReadsSLO reports whether the setup's decisions depend on an SLO in its config.
func (p Policy) ReadsSLO() bool {
	if p.Aggregated || p.HidePrefill || !p.Config.ConditionalDisagg {
		return false
	}
	spec, ok := decider.LookupPolicy(p.Config.Disagg.Policy)
	return ok && spec.ReadsField(decider.FieldSLOTTFTMs) && spec.ReadsField(decider.FieldSLOITLMs)
}

// DecidesWith is the SLO the setup decides with, when it reads one.
func (p Policy) DecidesWith() (SLO, bool) {
	if !p.ReadsSLO() {
		return SLO{}, false
	}
	return SLO{TTFT: msDuration(p.Config.Disagg.SLOTTFTMs), ITL: msDuration(p.Config.Disagg.SLOITLMs)}, true
}

// DecidingAt is the setup set to decide with s, when it reads an SLO; any other
// setup is returned as it is.
func (p Policy) DecidingAt(s SLO) Policy {
	if p.ReadsSLO() {
		p.Config.Disagg.SLOTTFTMs = float64(s.TTFT) / float64(time.Millisecond)
		p.Config.Disagg.SLOITLMs = float64(s.ITL) / float64(time.Millisecond)
	}
	return p
}

// PoliciesDecidingAt is DecidingAt applied to every setup of ps, in a new slice.
func PoliciesDecidingAt(ps []Policy, s SLO) []Policy {
	out := make([]Policy, len(ps))
	for i, p := range ps {
		out[i] = p.DecidingAt(s)
	}
	return out
}

// PolicySLONote is the line a report prints about the SLO its SLO-reading setups
// decided with ("" when none of ps reads one), so that a reader scoring at one SLO
// sees which one the policy aimed at.
func PolicySLONote(ps []Policy) string {
	for _, p := range ps {
		if s, ok := p.DecidesWith(); ok {
			return fmt.Sprintf("policy SLO: %s decides with TTFT ≤ %s and ITL ≤ %s", p.Name, s.TTFT, s.ITL)
		}
	}
	return ""
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
