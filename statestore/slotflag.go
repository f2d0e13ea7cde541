package statestore

// slotFlag is one derived per-(worker, dp rank) health flag: KV events
// missing (kvhealth.go) and KV block size mismatch (blocksize.go). Each is
// a rule over the slot's current state; the slot remembers the rule's last
// answer so that the log speaks once per transition, not per apply.
type slotFlag struct {
	holds   func(st *state, slot int32) bool  // the rule
	last    func(ws *slotState) *bool         // the slot's remembered answer
	enter   string                            // warning when a worker enters the state
	leave   string                            // note when it leaves it
	details func(st *state, slot int32) []any // attributes of the warning after worker and dp_rank
}

// recheck re-evaluates f for every slot of the view after a chunk (mu
// held, after rebuildView), logs a warning when a worker enters the state
// and a note when it leaves it, and returns how many slots are flagged
// (the gauge's count). At Open (initial) every flagged worker is logged
// once and nothing is said about the others.
func (s *Store) recheck(f *slotFlag, initial bool) int {
	st := s.st
	n := 0
	for slot := range st.workers {
		ws := st.workers[slot]
		// Only the (worker, rank) pairs of the view: a rank beyond the
		// registered dp_size is not a worker the decider sees.
		m := slot < len(st.slotRef) && st.slotRef[slot] >= 0 && f.holds(st, int32(slot))
		if m {
			n++
		}
		last := f.last(ws)
		if m == *last {
			continue
		}
		*last = m
		if m {
			s.log.Warn(f.enter, append([]any{"worker", ws.wr.id, "dp_rank", ws.wr.rank}, f.details(st, int32(slot))...)...)
		} else if !initial {
			s.log.Info(f.leave, "worker", ws.wr.id, "dp_rank", ws.wr.rank)
		}
	}
	return n
}

// checkSlotFlags re-evaluates every derived slot flag and keeps the
// gauges' counts (after each chunk, and once at Open).
func (s *Store) checkSlotFlags(initial bool) {
	s.st.kvMissing = s.recheck(&kvMissingFlag, initial)
	s.st.bsMismatch = s.recheck(&blockSizeFlag, initial)
}
