package statestore

import (
	"context"
	"fmt"
	"strings"

	"github.com/pdrouter/pdrouter/events"
)

// notifyApplied wakes WaitApplied's waiters: readers now see a new chunk.
// Called with mu held for writing, once per chunk. The channel is closed
// (waking every waiter at once) and replaced, so a waiter never misses a
// chunk applied between its check and its wait: it took the channel under
// the same lock as the offsets it checked.
func (s *Store) notifyApplied() {
	close(s.applied)
	s.applied = make(chan struct{})
}

// WaitApplied blocks until, for every partition in want, the next offset
// readers see (the view's watermark, which Decision and DecisionForRequest
// also reflect) is at least want's Next: every record below Next has been
// applied. A partition the store never applied counts as next offset 0,
// and a topic the store's Source does not read is not waited for.
// To wait for a record written at offset o, pass o+1.
//
// It wakes on each applied chunk (no polling), and returns nil at once
// when want is already reached, or ctx.Err() wrapped with what is still
// missing when ctx ends first.
func (s *Store) WaitApplied(ctx context.Context, want Offsets) error {
	for {
		s.mu.RLock()
		missing := s.st.missing(want, s.reads)
		ch := s.applied
		s.mu.RUnlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("statestore: waiting for applied offsets, still behind at %s: %w", strings.Join(missing, ", "), ctx.Err())
		}
	}
}

// reads reports whether the store reads the partition of o: every
// partition of the topics its Source applies, but for a store of load
// shares, whose materializer reads of load-deltas its writer's partition
// only (Materializer.consumes); until the materializer has found it, every
// one, so that a wait is never cut short.
func (s *Store) reads(o PartitionOffset) bool {
	if !s.opts.Source.Applies(o.Topic) {
		return false
	}
	if o.Topic == events.TopicLoadDeltas && s.opts.Source == SourceLoadShares {
		p := s.writerPartition.Load()
		return p < 0 || int64(o.Partition) == p
	}
	return true
}

// missing lists the partitions of want not reached, as
// "topic/partition applied A < want W".
func (st *state) missing(want Offsets, reads func(PartitionOffset) bool) []string {
	var out []string
	for _, w := range want {
		if !reads(w) {
			// A topic (or partition) this store never reads. The append
			// that gave those offsets also gave the ones it reads.
			continue
		}
		if got := st.offsets[topicPartition{w.Topic, w.Partition}]; got < w.Next {
			out = append(out, fmt.Sprintf("%s/%d applied %d < want %d", w.Topic, w.Partition, got, w.Next))
		}
	}
	return out
}
