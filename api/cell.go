package api

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/pdrouter/pdrouter/events"
)

// A replica of one cell (State.Cell) applies only its cell's partitions, so
// it refuses what it could not see through: a record it would write into
// another cell's partitions (the default partitioner places it by key), and
// an `after` wait on a partition it never reads, which would otherwise run
// into its timeout. Both are answered 421 Misdirected Request, naming the
// cell that can take the request.

// reasonWrongCell is the code of those answers and their rejected_total
// reason.
const reasonWrongCell = "wrong_cell"

// checkKeyCell refuses a record keyed key (a worker id) outside the cell.
func (s *Server) checkKeyCell(key []byte) error {
	cell := s.deps.State.Cell()
	if cell.OwnsKey(key) {
		return nil
	}
	owner := events.CellOfWorker(string(key), cell.Count)
	return misdirected(reasonWrongCell, "worker_id", fmt.Sprintf("worker %s is in cell %s, and this replica serves cell %s: send it to a replica of cell %s",
		quoted(string(key)), owner, cell, owner))
}

// checkAfterCell refuses an `after` vector naming another cell's
// partitions of a topic the state applies. It reports the smallest such
// partition, so the answer does not depend on map order. A topic the state
// does not apply is skipped in every partition, as WaitApplied skips it:
// forwards, whose offsets a forwarded lifecycle event answers, is read by
// the forward reader alone, and a client may pass on offsets a replica of
// another --load-deltas mode gave it.
func (s *Server) checkAfterCell(after Offsets) error {
	cell := s.deps.State.Cell()
	if cell.Whole() {
		return nil
	}
	for _, t := range events.AllTopics {
		if !s.deps.State.Applies(t) {
			continue
		}
		var foreign []int32
		for p := range after[t] {
			if !cell.OwnsPartition(p) {
				foreign = append(foreign, p)
			}
		}
		if len(foreign) > 0 {
			p := slices.Min(foreign)
			return misdirected(reasonWrongCell, "after."+string(t)+"."+strconv.Itoa(int(p)),
				fmt.Sprintf("partition %d is in cell %d/%d, and this replica serves cell %s, whose partitions it alone reads", p, p%cell.Count, cell.Count, cell))
		}
	}
	return nil
}
