package sim

import (
	"context"
	"errors"
	"sync"
	"time"
)

// liveLoop is the wall-clock side of a live fleet. The fleet stays single-threaded:
// its loop waits here until the next event is due in wall time, and other goroutines
// (the engines' HTTP handlers) hand it work through inject, which it runs between
// events. An injected function schedules what it brings at the simulated time of its
// wall arrival (simNow), so an HTTP request enters the engines exactly as a workload
// arrival at that instant would. Offline fleets have no liveLoop, and so stay a pure
// function of their inputs.
type liveLoop struct {
	start time.Time
	// scale is simulated seconds per wall second.
	scale  float64
	inject chan func()
	// stopped is closed when the loop will run nothing more, so that a handler
	// never waits on it forever.
	stopped  chan struct{}
	stopOnce sync.Once
}

func newLiveLoop(scale float64) *liveLoop {
	return &liveLoop{start: time.Now(), scale: scale, inject: make(chan func()), stopped: make(chan struct{})}
}

// errFleetStopped: the fleet's loop has ended; the engine cannot serve.
var errFleetStopped = errors.New("the simulated fleet has stopped")

// simNow is the simulated time of the wall clock's now.
func (l *liveLoop) simNow() simTime {
	return simTime(float64(time.Since(l.start)) * l.scale)
}

// wallAt is the wall instant of simulated time t.
func (l *liveLoop) wallAt(t simTime) time.Time {
	return l.start.Add(time.Duration(float64(t) / l.scale))
}

// wait blocks until simulated time t is due (when hasNext), an injected function
// arrives (it is run, and wait reports not due, so that the caller looks at the
// queue again), or ctx ends.
func (l *liveLoop) wait(ctx context.Context, t simTime, hasNext bool) (due bool, err error) {
	var timer <-chan time.Time
	if hasNext {
		d := time.Until(l.wallAt(t))
		if d <= 0 {
			// Due already; still take injected work first, so a loop that is
			// behind does not starve the handlers.
			select {
			case fn := <-l.inject:
				fn()
				return false, nil
			default:
				return true, ctx.Err()
			}
		}
		tm := time.NewTimer(d)
		defer tm.Stop()
		timer = tm.C
	}
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case fn := <-l.inject:
		fn()
		return false, nil
	case <-timer:
		return true, nil
	}
}

// run hands fn to the loop. It returns false when the loop has stopped or ctx ended
// first.
func (l *liveLoop) run(ctx context.Context, fn func()) bool {
	select {
	case l.inject <- fn:
		return true
	case <-l.stopped:
		return false
	case <-ctx.Done():
		return false
	}
}

// stop marks the loop stopped for good.
func (l *liveLoop) stop() { l.stopOnce.Do(func() { close(l.stopped) }) }

// serve keeps a live fleet's loop running after its workload, for its engines' HTTP
// requests, until ctx ends.
func (f *Fleet) serve(ctx context.Context) {
	for f.advance(ctx, true) {
	}
}
