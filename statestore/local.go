package statestore

import (
	"fmt"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// RecordLocalDecision counts a decision this replica just made, at once,
// makes it visible to Decision and DecisionForRequest, and in approximate
// mode adds its predicted cache entries (approx.go). d is retained and
// must not be modified afterwards.
//
// It counts the decision at once, before it comes back from the
// decisions topic (conditional-disagg.md: "a
// replica counts its own decision at once and ignores it when the decision
// comes back from the log, keyed by decision id"). It changes only memory,
// never Pebble or the digest: the state stays a function of the log, and
// the pending decision is dropped when the log copy is applied (which then
// counts it) or when it expires by event time without coming back.
func (s *Store) RecordLocalDecision(d *pb.DecisionRecord) error {
	if err := events.Validate(d); err != nil {
		return fmt.Errorf("statestore: local decision: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.recordLocal(d)
	if !s.decisionApplied(d.GetDecisionId()) {
		s.st.recordLocalDecision(d)
	}
	if s.st.viewDirty {
		s.st.rebuildView()
	}
	return nil
}
