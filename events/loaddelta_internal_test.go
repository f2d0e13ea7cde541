package events

import (
	"testing"

	"github.com/pdrouter/pdrouter/decider"
)

// The load delta's latency bounds are the decider's: events does not import
// the decider, so this test holds them equal.
func TestLoadDeltaBoundsMatchDecider(t *testing.T) {
	if LoadDeltaLatencyInputs != decider.LatencyK-1 {
		t.Errorf("LoadDeltaLatencyInputs %d, decider.LatencyK-1 %d", LoadDeltaLatencyInputs, decider.LatencyK-1)
	}
	if loadDeltaLatencyPaths != decider.NumPaths {
		t.Errorf("loadDeltaLatencyPaths %d, decider.NumPaths %d", loadDeltaLatencyPaths, decider.NumPaths)
	}
	if maxLatencyInput != decider.MaxLatencyFeature {
		t.Errorf("maxLatencyInput %d, decider.MaxLatencyFeature %d", maxLatencyInput, decider.MaxLatencyFeature)
	}
}
