package events

import (
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/decider"
)

// A share's recent second must be allowed to lie as far before its
// record's clock as a peer still counts it: events does not import the
// decider, so this test holds the bound above its window.
func TestShareRecentAgeCoversDecider(t *testing.T) {
	if MaxShareRecentAge*time.Second < decider.RecentLocalWindow {
		t.Errorf("MaxShareRecentAge %d s, decider.RecentLocalWindow %v", MaxShareRecentAge, decider.RecentLocalWindow)
	}
}
