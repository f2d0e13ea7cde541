package decider_test

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
)

// TestDocsMatchTheTables: docs/conditional-disagg.md names no policy the decider's
// table lacks, and its reason table lists exactly the reason codes of Reasons, which
// are the values of the decisions metric's reason label that alerts select on.
func TestDocsMatchTheTables(t *testing.T) {
	doc, err := os.ReadFile("../docs/conditional-disagg.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `policy` \\|.*$").Find(doc)
	if row == nil {
		t.Fatal("docs/conditional-disagg.md has no `policy` row in its config table")
	}
	policies := regexp.MustCompile("`([a-z_]+)`").FindAllSubmatch(row, -1)
	for _, m := range policies[1:] { // [0] is the field name
		if _, ok := decider.LookupPolicy(decider.Policy(m[1])); !ok {
			t.Errorf("the docs name policy %s, which the decider's table lacks", m[1])
		}
	}
	var documented []decider.Reason
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (local|remote) \\|").FindAllSubmatch(doc, -1) {
		documented = append(documented, decider.Reason(m[1]))
	}
	for _, r := range decider.Reasons() {
		if !slices.Contains(documented, r) {
			t.Errorf("the docs' reason table lacks %s", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(decider.Reasons(), r) {
			t.Errorf("the docs' reason table has %s, which no policy declares", r)
		}
	}
	if len(documented) == 0 || len(policies) < 2 {
		t.Fatalf("found %d reasons and %d policies in the docs", len(documented), len(policies)-1)
	}
}
