package sim

import (
	"slices"
	"strconv"
	"strings"

	"github.com/pdrouter/pdrouter/decider"
)

// Plan is the result of RunPlan: every cell, each shape's best policy per SLO set,
// and the recommendation per SLO set.
type Plan struct {
	Workload string    `json:"workload"`
	Requests int       `json:"requests"`
	GPUs     int       `json:"gpus"`
	Loads    []float64 `json:"load_scales"`
	SLOs     []SLO     `json:"-"`
	SLOSets  []string  `json:"slo_sets"`
	Shapes   []string  `json:"shapes"`
	Policies []string  `json:"policies"`
	// PolicySLONote says which SLO the SLO-reading policies decided with ("" when
	// none ran).
	PolicySLONote string `json:"policy_slo,omitempty"`
	// Cells in run order: per load level, the aggregated reference, then every
	// shape's policies.
	Cells []PlanCell `json:"cells"`
	// Rows are per SLO set (outer) and shape (inner): goodput averaged over the
	// load levels.
	Rows []PlanRow `json:"rows"`
	// Recommendations, one per SLO set, in the order of SLOSets.
	Recommendations []PlanRecommendation `json:"recommendations"`
}

// PlanRow is one shape under one SLO set, its goodput averaged over the load levels.
type PlanRow struct {
	SLO   string `json:"slo"`
	Shape string `json:"shape"`
	// Goodput per policy, in the order of the plan's Policies.
	Goodput     []float64 `json:"goodput"`
	BestPolicy  string    `json:"best_policy"`
	BestGoodput float64   `json:"best_goodput"`
	good        []int     // per policy, summed over the load levels: the exact score
}

// PlanRecommendation names the shape and policy with the best goodput under one SLO set.
type PlanRecommendation struct {
	SLO     string  `json:"slo"`
	Shape   string  `json:"shape"`
	Policy  string  `json:"policy"`
	Goodput float64 `json:"goodput"`
	// RouterFlags configure pdrouter's router to run the policy.
	RouterFlags string `json:"router_flags"`
	// Aggregated is the goodput of aggregated serving on the same GPUs (all decode,
	// KV-aware routing), and AggregatedBeats whether it is strictly higher.
	Aggregated      float64 `json:"aggregated_goodput"`
	AggregatedBeats bool    `json:"aggregated_beats"`
}

// rank fills Rows and Recommendations. The score of a shape and policy is the number
// of good requests summed over the load levels (every level has the same requests, so
// this is the mean goodput, compared exactly as integers). Ties go to fewer prefill
// GPUs, then to the policy earlier in Policies' order (always-local, always-remote,
// then the decider's policies in its table order: the static ones before slo, the
// one that learns online).
func (p *Plan) rank(c PlanConfig) {
	for _, s := range c.SLOs {
		p.SLOSets = append(p.SLOSets, s.String())
	}
	total := float64(len(c.Loads) * p.Requests)
	for si := range c.SLOs {
		aggGood := 0
		for _, cell := range p.Cells {
			if cell.Shape == AggregatedLabel {
				aggGood += cell.Good[si]
			}
		}
		var best PlanRecommendation
		bestGood := -1
		for _, sh := range c.Shapes {
			row := PlanRow{SLO: p.SLOSets[si], Shape: sh.String(), good: make([]int, len(c.Policies))}
			for _, cell := range p.Cells {
				if cell.Shape != row.Shape {
					continue
				}
				row.good[slices.Index(p.Policies, cell.Policy)] += cell.Good[si]
			}
			bi := 0
			for pi, g := range row.good {
				row.Goodput = append(row.Goodput, float64(g)/total)
				if g > row.good[bi] { // strict: an earlier (cheaper) policy keeps a tie
					bi = pi
				}
			}
			row.BestPolicy, row.BestGoodput = p.Policies[bi], row.Goodput[bi]
			p.Rows = append(p.Rows, row)
			// Shapes are in ascending prefill order, so strict > keeps fewer prefill GPUs on a tie.
			if row.good[bi] > bestGood {
				bestGood = row.good[bi]
				best = PlanRecommendation{SLO: row.SLO, Shape: row.Shape, Policy: row.BestPolicy, Goodput: row.BestGoodput,
					RouterFlags: RouterFlags(c.Policies[bi])}
			}
		}
		best.Aggregated = float64(aggGood) / total
		best.AggregatedBeats = aggGood > bestGood
		p.Recommendations = append(p.Recommendations, best)
	}
}

// RouterFlags are the router flags that run a policy of the comparison on a real
// fleet: always-remote is conditional disaggregation off, always-local is a fleet
// whose prefill workers are not registered, and cond-NAME is conditional
// disaggregation with NAME's config.
func RouterFlags(p Policy) string {
	switch {
	case p.Aggregated:
		return "(register every GPU as a decode worker)"
	case p.HidePrefill:
		return "(register no prefill workers: every prompt is prefilled on its decode worker)"
	case !p.Config.ConditionalDisagg:
		return "(leave --router-conditional-disagg off: every prompt is prefilled on a prefill worker)"
	}
	return "--router-conditional-disagg --router-conditional-disagg-config '" + DisaggConfigJSON(p.Config.Disagg) + "'"
}

// DisaggConfigJSON renders a disaggregation config as the JSON of
// --router-conditional-disagg-config: the policy, and every other key whose value
// differs from its default (under slo, its two SLO bounds always), in the key order
// of the flag's documentation. decider.ParseDisaggConfig reads it back to d.
func DisaggConfigJSON(d decider.DisaggConfig) string {
	def := decider.DefaultDisaggConfig()
	var b strings.Builder
	b.WriteString(`{"policy":` + strconv.Quote(string(d.Policy)))
	num := func(key string, v float64) {
		b.WriteString(`,"` + key + `":` + strconv.FormatFloat(v, 'g', -1, 64))
	}
	integer := func(key string, v int64) {
		b.WriteString(`,"` + key + `":` + strconv.FormatInt(v, 10))
	}
	if d.EffISLThreshold != def.EffISLThreshold {
		integer(decider.FieldEffISLThreshold, d.EffISLThreshold)
	}
	if d.EffISLRatioThreshold != def.EffISLRatioThreshold {
		num(decider.FieldEffISLRatioThreshold, d.EffISLRatioThreshold)
	}
	if d.PrefillBusyThreshold.Set {
		num(decider.FieldPrefillBusyThreshold, d.PrefillBusyThreshold.Value)
	}
	if d.DecodeBusyThreshold.Set {
		num(decider.FieldDecodeBusyThreshold, d.DecodeBusyThreshold.Value)
	}
	if d.DecodeBusySource != def.DecodeBusySource {
		b.WriteString(`,"` + decider.FieldDecodeBusySource + `":` + strconv.Quote(string(d.DecodeBusySource)))
	}
	if d.Policy == decider.PolicySLO {
		num(decider.FieldSLOTTFTMs, d.SLOTTFTMs)
		num(decider.FieldSLOITLMs, d.SLOITLMs)
		if d.SLOMinSamples != def.SLOMinSamples {
			integer(decider.FieldSLOMinSamples, d.SLOMinSamples)
		}
		if d.SLOITLGuard != def.SLOITLGuard {
			b.WriteString(`,"` + decider.FieldSLOITLGuard + `":` + strconv.FormatBool(d.SLOITLGuard))
		}
	}
	b.WriteString("}")
	return b.String()
}
