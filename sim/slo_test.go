package sim

import (
	"bytes"
	"context"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
)

// TestSLOLearnsDuringARun: the slo policy starts cold and learns from the outcomes the
// simulated fleet emits, in simulated time, through the product's model code, on a
// small grid of the Mooncake sample (two shapes of 8 GPUs, loads 1× and 1.5×). The
// run is deterministic: the same inputs give the same report, byte for byte. This is
// a test of the learning path, not of the goodput bar (docs/slo-policy.md has the
// grid on the whole trace): slo_min_samples is lowered so that 300 requests warm it.
func TestSLOLearnsDuringARun(t *testing.T) {
	w, err := LoadMooncake(mooncakeSample)
	if err != nil {
		t.Fatal(err)
	}
	p, err := PolicyByName(CondPrefix + string(decider.PolicySLO))
	if err != nil {
		t.Fatal(err)
	}
	p.Config.Disagg.SLOMinSamples = 20
	for _, sh := range []Shape{{2, 6}, {6, 2}} {
		for _, load := range []float64{1, 1.5} {
			fc := DefaultFleet()
			fc.Prefill, fc.Decode = sh.Prefill, sh.Decode
			run := func() (*Report, []byte) {
				rep, err := RunOffline(context.Background(), fc, w.Scale(load), p, nil)
				if err != nil {
					t.Fatal(err)
				}
				var b bytes.Buffer
				rep.Format(&b)
				return rep, b.Bytes()
			}
			rep, a := run()
			_, b := run()
			if !bytes.Equal(a, b) {
				t.Fatalf("%s ×%g: two runs differ:\n%s\n%s", sh, load, a, b)
			}
			// Every slo reason the decider's table lists is a cold start's or a
			// warm model's, so a reason added to the policy counts without this
			// test naming it.
			var cold, warm int
			for _, r := range sloReasons(t) {
				if r == decider.ReasonSLOColdLocal || r == decider.ReasonSLOColdRemote {
					cold += rep.Reasons[string(r)]
				} else {
					warm += rep.Reasons[string(r)]
				}
			}
			if cold == 0 || warm == 0 || cold+warm != rep.Local+rep.Remote {
				t.Fatalf("%s ×%g: %d cold and %d warm decisions of %d: %v", sh, load, cold, warm, rep.Local+rep.Remote, rep.Reasons)
			}
			t.Logf("%s ×%g: %d cold, then %d warm decisions; goodput %.1f%%", sh, load, cold, warm, 100*rep.Goodput)
		}
	}
}

// sloReasons are the reason codes of the slo policy, from the decider's table.
func sloReasons(t *testing.T) []decider.Reason {
	for _, p := range decider.Policies() {
		if p.Name == decider.PolicySLO {
			return p.Reasons
		}
	}
	t.Fatal("the decider's table has no slo policy")
	return nil
}
