package api

import (
	"context"
	"sync"

	"github.com/pdrouter/pdrouter/events"
)

// ownWrites is the highest offset this server wrote to each partition of
// the workers topic. HTTP ingest refuses events for a worker the state does
// not know; before it does, it waits until the state has applied this
// server's own registrations, so a client that registers a worker and posts
// its events through the same replica is never told the worker is unknown.
// It holds one offset per partition, so it stays as small as the topic.
type ownWrites struct {
	mu   sync.Mutex
	high map[int32]int64
}

// note records the positions of an append.
func (w *ownWrites) note(ps []Position) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range ps {
		if p.Topic != events.TopicWorkers {
			continue
		}
		if w.high == nil {
			w.high = map[int32]int64{}
		}
		if cur, ok := w.high[p.Partition]; !ok || p.Offset > cur {
			w.high[p.Partition] = p.Offset
		}
	}
}

// after is what the state must have applied for every registration this
// server wrote to be visible, or nil when it wrote none.
func (w *ownWrites) after() Offsets {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.high) == 0 {
		return nil
	}
	parts := make(map[int32]int64, len(w.high))
	for p, o := range w.high {
		parts[p] = o
	}
	return Offsets{events.TopicWorkers: parts}
}

// registered is State.Registered after the state has caught up with this
// server's own registrations. When the state cannot catch up within the
// after timeout (its materializer is stalled or far behind), the answer is
// "registered": refusing then would drop good events for a reason that is
// this replica's, not the caller's, and every replica's apply-side budget
// for unregistered ids (statestore) still bounds what such events can cost.
func (s *Server) registered(ctx context.Context, id string) (uint32, bool) {
	if n, ok := s.deps.State.Registered(id); ok {
		return n, true
	}
	after := s.own.after()
	if after == nil {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.afterTimeout)
	defer cancel()
	if err := s.deps.State.WaitApplied(ctx, after); err != nil {
		return 0, true
	}
	return s.deps.State.Registered(id)
}
