package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
)

// planSample is a small plan: the sample trace's first 60 requests on 4 GPUs at two
// load levels, under two SLO sets, so that it runs in seconds.
func planSample(t *testing.T, parallel int) (*Plan, *Workload) {
	t.Helper()
	w := loadSample(t).Head(60)
	p, err := RunPlan(context.Background(), PlanConfig{Fleet: DefaultFleet(), GPUs: 4, Loads: []float64{1.5, 1},
		SLOs: []SLO{DefaultSLO(), {TTFT: 500e6, ITL: 20e6}}, Parallel: parallel}, w)
	if err != nil {
		t.Fatal(err)
	}
	return p, w
}

// TestPlanDeterministicAcrossParallel: the table and the JSON are the same bytes
// whatever the number of runs going at once.
func TestPlanDeterministicAcrossParallel(t *testing.T) {
	a, _ := planSample(t, 1)
	b, _ := planSample(t, 3)
	var ta, tb bytes.Buffer
	a.Format(&ta)
	b.Format(&tb)
	if ta.String() != tb.String() {
		t.Fatalf("--parallel 1:\n%s\n--parallel 3:\n%s", ta.String(), tb.String())
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatal("the JSON differs between --parallel 1 and 3")
	}
	var sa, sb bytes.Buffer
	if err := a.WriteSVG(&sa); err != nil {
		t.Fatal(err)
	}
	_ = b.WriteSVG(&sb)
	if sa.String() != sb.String() || !strings.HasPrefix(sa.String(), "<svg") {
		t.Fatal("the SVG differs or is not an SVG")
	}
	if len(a.Cells) != 2*(1+3*len(DisaggPolicies())) {
		t.Fatalf("%d cells; want 2 loads × (aggregated + 3 shapes × %d policies)", len(a.Cells), len(DisaggPolicies()))
	}
	t.Logf("\n%s", ta.String())
}

// TestPlanIsArgmaxOfCompare: every cell of the plan has the goodput `sim compare` (the
// Compare code path, one shape at a time, in sequence) reports for it, and the
// recommendation is the argmax of those figures under the documented tie rule.
func TestPlanIsArgmaxOfCompare(t *testing.T) {
	p, w := planSample(t, 2)
	// The runs do not depend on the SLO sets they are scored under: each shape and
	// load is compared once, with cond-slo deciding at the plan's first set.
	type key struct {
		shape string
		load  float64
	}
	runs := map[key][]*Report{}
	for _, sh := range AllShapes(4) {
		for _, x := range []float64{1, 1.5} {
			fc := DefaultFleet()
			fc.Prefill, fc.Decode = sh.Prefill, sh.Decode
			reps, err := Compare(context.Background(), fc, w.Scale(x), PoliciesDecidingAt(Policies(), p.SLOs[0]), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range reps {
				if cell := findCell(t, p, x, sh.String(), r.Label); cell.Good[0] != r.Good {
					t.Errorf("%s %s ×%g: plan %d good, compare %d", sh, r.Label, x, cell.Good[0], r.Good)
				}
			}
			runs[key{sh.String(), x}] = reps
		}
	}
	for si, slo := range p.SLOs {
		bestGood, bestShape, bestPolicy := -1, "", ""
		for _, sh := range AllShapes(4) {
			good := map[string]int{}
			for _, x := range []float64{1, 1.5} {
				for _, r := range runs[key{sh.String(), x}] {
					if r.Label != AggregatedLabel {
						good[r.Label] += r.GoodUnder(slo)
					}
				}
			}
			for _, pol := range DisaggPolicies() { // ascending prefill, policy order: strict > is the tie rule
				if good[pol.Name] > bestGood {
					bestGood, bestShape, bestPolicy = good[pol.Name], sh.String(), pol.Name
				}
			}
		}
		rec := p.Recommendations[si]
		if rec.Shape != bestShape || rec.Policy != bestPolicy {
			t.Errorf("SLO %s: plan recommends %s %s, the argmax of compare is %s %s", slo, rec.Shape, rec.Policy, bestShape, bestPolicy)
		}
	}
}

func findCell(t *testing.T, p *Plan, load float64, shape, policy string) PlanCell {
	t.Helper()
	if policy == AggregatedLabel {
		shape = AggregatedLabel
	}
	for _, c := range p.Cells {
		if c.Load == load && c.Shape == shape && c.Policy == policy {
			return c
		}
	}
	t.Fatalf("no cell %s %s ×%g", shape, policy, load)
	return PlanCell{}
}

// TestPlanTieRule: equal scores go to fewer prefill GPUs, then to the earlier policy.
func TestPlanTieRule(t *testing.T) {
	p := &Plan{Requests: 10, Policies: []string{"always-local", "cond-slo"}}
	c := PlanConfig{GPUs: 3, Shapes: AllShapes(3), Loads: []float64{1}, SLOs: []SLO{DefaultSLO()},
		Policies: []Policy{mustPolicy(t, "always-local"), mustPolicy(t, "cond-slo")}}
	for _, sh := range []string{"1P2D", "2P1D"} {
		for _, pol := range p.Policies {
			p.Cells = append(p.Cells, PlanCell{Load: 1, Shape: sh, Policy: pol, Good: []int{7}})
		}
	}
	p.Cells = append(p.Cells, PlanCell{Load: 1, Shape: AggregatedLabel, Policy: AggregatedLabel, Good: []int{7}})
	p.rank(c)
	if r := p.Recommendations[0]; r.Shape != "1P2D" || r.Policy != "always-local" || r.AggregatedBeats {
		t.Fatalf("tie: %+v", r)
	}
	p.Cells[3].Good[0] = 8 // 2P1D cond-slo
	p.Rows, p.Recommendations, p.SLOSets = nil, nil, nil
	p.rank(c)
	if r := p.Recommendations[0]; r.Shape != "2P1D" || r.Policy != "cond-slo" {
		t.Fatalf("strictly better: %+v", r)
	}
}

func mustPolicy(t *testing.T, name string) Policy {
	t.Helper()
	p, err := PolicyByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlanConfigRefused: a plan that cannot be run is refused before any run.
func TestPlanConfigRefused(t *testing.T) {
	w := loadSample(t).Head(2)
	for _, tc := range []struct {
		c    PlanConfig
		want string
	}{
		{PlanConfig{GPUs: 1}, "--gpus 1"},
		{PlanConfig{GPUs: 65}, "--gpus 65"},
		{PlanConfig{GPUs: 4, Shapes: []Shape{{2, 3}}}, "2P3D is not a split of 4 GPUs"},
		{PlanConfig{GPUs: 4, Shapes: []Shape{{0, 4}}}, "0P4D is not a split"},
		{PlanConfig{GPUs: 4, Shapes: []Shape{{1, 3}, {1, 3}}}, "1P3D appears twice"},
		{PlanConfig{GPUs: 4, Policies: []Policy{mustPolicy(t, "aggregated")}}, "reference row"},
		{PlanConfig{GPUs: 4, Policies: []Policy{mustPolicy(t, "cond-slo"), mustPolicy(t, "cond-slo")}}, "cond-slo appears twice"},
		{PlanConfig{GPUs: 4, Loads: []float64{0}}, "--load-scale 0"},
		{PlanConfig{GPUs: 4, Loads: []float64{1, 1}}, "--load-scale 1 appears twice"},
		{PlanConfig{GPUs: 4, Loads: make([]float64, MaxLoadScales+1)}, "17 levels; want 1 to 16"},
	} {
		_, err := RunPlan(context.Background(), tc.c, w)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gpus %d shapes %v loads %v: err %v; want %q", tc.c.GPUs, tc.c.Shapes, tc.c.Loads, err, tc.want)
		}
	}
}

// TestDisaggConfigJSONReadsBack: the recommended config JSON parses to exactly the
// config the simulator ran.
func TestDisaggConfigJSONReadsBack(t *testing.T) {
	for _, p := range DisaggPolicies() {
		if !p.Config.ConditionalDisagg {
			continue
		}
		js := DisaggConfigJSON(p.Config.Disagg)
		got, err := decider.ParseDisaggConfig([]byte(js))
		if err != nil {
			t.Fatalf("%s: %s: %v", p.Name, js, err)
		}
		if !reflect.DeepEqual(got, p.Config.Disagg) {
			t.Errorf("%s: %s reads back as %+v, ran %+v", p.Name, js, got, p.Config.Disagg)
		}
		if !strings.Contains(RouterFlags(p), js) {
			t.Errorf("%s: flags %q", p.Name, RouterFlags(p))
		}
	}
	d := decider.DefaultDisaggConfig()
	d.Policy, d.EffISLThreshold, d.SLOMinSamples, d.SLOITLGuard, d.DecodeBusySource = decider.PolicySLO, 123456789, 7, false, decider.BusySourceMax
	d.DecodeBusyThreshold = decider.Some(0.25)
	got, err := decider.ParseDisaggConfig([]byte(DisaggConfigJSON(d)))
	if err != nil || !reflect.DeepEqual(got, d) {
		t.Fatalf("%s: %+v, %v", DisaggConfigJSON(d), got, err)
	}
}
