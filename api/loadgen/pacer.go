package loadgen

import (
	"sync"
	"sync/atomic"
	"time"
)

// pacer holds a closed-loop run at a rate by a think time: each client,
// once answered, waits the same think time before it sends again, and a
// controller moves the think time until the clients together send rate
// requests a second.
//
// A run paced at another run's rate compares the two per decision at one
// rate, which matters once part of a process's cost is per second rather
// than per decision. Spacing the requests evenly would do that too, but in
// another regime: closed-loop clients answered by one group commit send
// again together, so their next requests share a commit, where evenly
// spaced ones batch less. With a think time the clients stay a closed
// loop, and answered together they wait together and send together.
//
// The controller needs a few of its periods to settle, and answers that
// speed up overshoot it for a period: a token bucket of paceBurst caps the
// rate whatever the think time, so that a short run or a jittery one is
// never paced above its rate for longer than the burst. The controller
// aims paceAim under the rate, so that in a steady run the think time
// holds the rate and the bucket, which spaces requests evenly when it
// binds, seldom does.
type pacer struct {
	clients float64
	cycle   time.Duration // the cycle of a client at the aim: clients / (paceAim·rate)
	think   atomic.Int64  // ns
	every   time.Duration // 1 / rate

	mu   sync.Mutex
	next time.Time // when the bucket holds its next token
}

// paceEvery is how often the controller compares the rate with its aim.
const paceEvery = 250 * time.Millisecond

// paceBurst is the token bucket's depth, in time at the rate.
const paceBurst = 250 * time.Millisecond

// paceAim is the share of the rate the think time aims at.
const paceAim = 0.97

// newPacer is a pacer of clients at rate requests a second; nil (no
// pacing) for a rate ≤ 0. The think time starts at a whole cycle, as if
// answers took no time, so the rate starts below its aim, never above.
func newPacer(clients int, rate float64) *pacer {
	if rate <= 0 || clients <= 0 {
		return nil
	}
	p := &pacer{clients: float64(clients), cycle: time.Duration(float64(clients) / (paceAim * rate) * float64(time.Second)),
		every: time.Duration(float64(time.Second) / rate)}
	p.think.Store(int64(p.cycle))
	return p
}

// wait sleeps the think time, then until the bucket has a token; false if
// stop closed first.
func (p *pacer) wait(stop <-chan struct{}) bool {
	if !sleep(time.Duration(p.think.Load()), stop) {
		return false
	}
	p.mu.Lock()
	now := time.Now()
	if oldest := now.Add(-paceBurst); p.next.Before(oldest) {
		p.next = oldest
	}
	token := p.next
	p.next = token.Add(p.every)
	p.mu.Unlock()
	return sleep(token.Sub(now), stop)
}

// sleep sleeps d; false if stop closed first.
func sleep(d time.Duration, stop <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// control moves the think time every paceEvery by half the difference
// between the cycle at the aim and the cycle measured (sent counts the
// requests sent so far), within [0, cycle], until stop closes.
func (p *pacer) control(sent *atomic.Int64, stop <-chan struct{}) {
	tick := time.NewTicker(paceEvery)
	defer tick.Stop()
	last, at := sent.Load(), time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			n := sent.Load()
			if n > last {
				measured := time.Duration(p.clients * float64(now.Sub(at)) / float64(n-last))
				think := time.Duration(p.think.Load()) + (p.cycle-measured)/2
				p.think.Store(int64(min(max(think, 0), p.cycle)))
			}
			last, at = n, now
		}
	}
}
