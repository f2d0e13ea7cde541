package replay

import (
	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// deciderFor returns a decider for cfg with the semantics rec was decided
// with, so that recomputing an old record reproduces it instead of showing
// every difference a later decider version makes. A record of a version this
// build cannot decide with (0, or a newer build's) gets the current version;
// attributePure then names the version as the cause of its differences.
func deciderFor(cfg decider.Config, rec *pb.DecisionRecord) (*decider.Decider, error) {
	return decider.NewAt(cfg, recomputeVersion(rec))
}

// recomputeVersion is the decider version a record is recomputed with.
func recomputeVersion(rec *pb.DecisionRecord) uint32 {
	if v := rec.GetDeciderVersion(); decider.SupportsVersion(v) {
		return v
	}
	return decider.Version
}
