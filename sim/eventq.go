package sim

import (
	"container/heap"
	"time"
)

// simTime is simulated time since the start of a run.
type simTime = time.Duration

// event is one scheduled happening. fn runs at at.
type event struct {
	at  simTime
	seq uint64
	fn  func()
}

// eventQueue is the discrete-event clock. Events run in time order; events at the same
// time run in the order they were scheduled, so a run never depends on heap internals
// and is reproducible.
type eventQueue struct {
	now  simTime
	next uint64
	h    eventHeap
}

// at schedules fn at time t (not before now).
func (q *eventQueue) at(t simTime, fn func()) {
	if t < q.now {
		t = q.now
	}
	q.next++
	heap.Push(&q.h, event{at: t, seq: q.next, fn: fn})
}

// after schedules fn d after now.
func (q *eventQueue) after(d time.Duration, fn func()) { q.at(q.now+d, fn) }

// peek returns the time of the next event.
func (q *eventQueue) peek() (simTime, bool) {
	if len(q.h) == 0 {
		return 0, false
	}
	return q.h[0].at, true
}

// pop advances the clock to the next event and returns it.
func (q *eventQueue) pop() (event, bool) {
	if len(q.h) == 0 {
		return event{}, false
	}
	e := heap.Pop(&q.h).(event)
	q.now = e.at
	return e, true
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
