package sim

import (
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
)

// TestPoliciesFollowTheDeciderTable: `sim compare` runs each policy of the decider's
// table, as cond-NAME under that policy with the feature on and a valid config, and
// PolicyByName names every setup when it finds none.
func TestPoliciesFollowTheDeciderTable(t *testing.T) {
	byName := map[string]Policy{}
	for _, p := range Policies() {
		byName[p.Name] = p
	}
	for _, spec := range decider.Policies() {
		p, ok := byName[CondPrefix+string(spec.Name)]
		if !ok {
			t.Errorf("no setup for decider policy %s among %v", spec.Name, PolicyNames())
			continue
		}
		if !p.Config.ConditionalDisagg || p.Config.Disagg.Policy != spec.Name {
			t.Errorf("%s: conditional_disagg %v, policy %s", p.Name, p.Config.ConditionalDisagg, p.Config.Disagg.Policy)
		}
		if _, err := decider.New(p.Config); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
	if len(byName) != 3+len(decider.Policies()) {
		t.Errorf("setups %v: want aggregated, always-local, always-remote and one per decider policy", PolicyNames())
	}
	_, err := PolicyByName("nope")
	if err == nil || !strings.Contains(err.Error(), strings.Join(PolicyNames(), ", ")) {
		t.Fatalf("PolicyByName(nope) = %v", err)
	}
}
