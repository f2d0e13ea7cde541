package sim

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
)

// TestPoliciesDecidingAtSetsOnlyTheSLOReaders: cond-slo takes the SLO it is given as
// its slo_ttft_ms/slo_itl_ms, every setup that reads no SLO is unchanged, and the
// input slice is not written.
func TestPoliciesDecidingAtSetsOnlyTheSLOReaders(t *testing.T) {
	tight := SLO{TTFT: 1000 * 1e6, ITL: 25 * 1e6}
	ps := Policies()
	got := PoliciesDecidingAt(ps, tight)
	readers := 0
	for i, p := range got {
		if p.Name == CondPrefix+string(decider.PolicySLO) {
			readers++
			if p.Config.Disagg.SLOTTFTMs != 1000 || p.Config.Disagg.SLOITLMs != 25 {
				t.Errorf("%s decides with %v/%v ms; want 1000/25", p.Name, p.Config.Disagg.SLOTTFTMs, p.Config.Disagg.SLOITLMs)
			}
			if s, ok := p.DecidesWith(); !ok || s != tight {
				t.Errorf("%s: DecidesWith %v %v", p.Name, s, ok)
			}
			if ps[i].Config.Disagg.SLOTTFTMs == 1000 {
				t.Errorf("the input slice was written")
			}
			continue
		}
		if p.Config != ps[i].Config {
			t.Errorf("%s reads no SLO but its config changed", p.Name)
		}
		if _, ok := p.DecidesWith(); ok {
			t.Errorf("%s: DecidesWith reports an SLO", p.Name)
		}
	}
	if readers != 1 {
		t.Fatalf("%d setups read an SLO; want cond-slo alone", readers)
	}
	if note := PolicySLONote(got); note != "policy SLO: cond-slo decides with TTFT ≤ 1s and ITL ≤ 25ms" {
		t.Fatalf("note %q", note)
	}
	if note := PolicySLONote(got[:3]); note != "" {
		t.Fatalf("static setups only: note %q", note)
	}
}

// TestTighterPolicySLOChangesDecisions: cond-slo aimed at 1000/25 decides otherwise
// than aimed at 2000/50 on the same run, and its report says which SLO it used;
// a static policy's report is the same bytes whatever the policy SLO.
func TestTighterPolicySLOChangesDecisions(t *testing.T) {
	w, err := LoadMooncake(mooncakeSample)
	if err != nil {
		t.Fatal(err)
	}
	fc := DefaultFleet()
	fc.Prefill, fc.Decode = 2, 6
	w = w.Scale(1.5)
	run := func(name string, at SLO) (*Report, string) {
		p, err := PolicyByName(name)
		if err != nil {
			t.Fatal(err)
		}
		p = p.DecidingAt(at)
		p.Config.Disagg.SLOMinSamples = 20
		rep, err := RunOffline(context.Background(), fc, w, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		rep.Format(&b)
		return rep, b.String()
	}
	loose, tight := DefaultSLO(), SLO{TTFT: 1000 * 1e6, ITL: 25 * 1e6}
	slo := CondPrefix + string(decider.PolicySLO)
	a, atext := run(slo, loose)
	b, btext := run(slo, tight)
	if !strings.Contains(btext, "the policy decided with TTFT ≤ 1s and ITL ≤ 25ms") || !strings.Contains(atext, "TTFT ≤ 2s and ITL ≤ 50ms") {
		t.Fatalf("the reports do not say the policy's SLO:\n%s\n%s", atext, btext)
	}
	t.Logf("local %d at 2000/50, %d at 1000/25; reasons %v, %v", a.Local, b.Local, a.Reasons, b.Reasons)
	if a.Local == b.Local && reflect.DeepEqual(a.Reasons, b.Reasons) {
		t.Fatalf("cond-slo decided the same at 2000/50 and 1000/25:\n%s", atext)
	}
	_, s1 := run("always-remote", loose)
	_, s2 := run("always-remote", tight)
	if s1 != s2 || strings.Contains(s1, "policy SLO") {
		t.Fatalf("a static policy's report depends on the policy SLO:\n%s\n%s", s1, s2)
	}
}
