package statestore

import (
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// A writer's snapshots (docs/scaling.md, "Next: a writer's load as
// snapshots"). With SourceLoadShares a replica's store holds its own
// requests exactly (its own partition of load-deltas and the decisions it
// recorded locally) and its peers' load as rows of their snapshots. The
// group commit asks it, once per commit, for the snapshot of the workers
// whose own share changed (TakeShares), appends it on load-shares keyed by
// the replica, and hands back a snapshot it could not write
// (SharesNotSent), so that its workers go again with the next one.

// TakeShares returns the snapshot to append with the next group commit: the
// replica's own share of each worker whose share changed since the last
// snapshot taken, or that is due to be repeated, with the next sequence
// number and the store's clock. nil: nothing to send, or the store does not
// keep load shares.
func (s *Store) TakeShares() *pb.LoadShares { return nil }

// SharesNotSent hands back a snapshot TakeShares returned that was not
// written: its workers are sent again, with their share as it is then, in
// the next snapshot.
func (s *Store) SharesNotSent(*pb.LoadShares) {}

// SharesChanged is signalled (without blocking; it holds at most one
// signal) when an own share changes, so that a writer with no append
// queued still sends its snapshot. nil when the store keeps no load shares.
func (s *Store) SharesChanged() <-chan struct{} { return nil }
