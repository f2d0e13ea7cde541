package loadgen

import (
	"sync"
	"time"
)

// pacer spaces the clients' route requests evenly at a rate, all clients
// together: a run paced at another run's rate compares the two per
// decision at one rate, which matters once part of a process's cost is per
// second rather than per decision. Slots missed while every client waited
// for an answer are made up, but only those of the last maxPaceDebt: the
// rate holds over a run without a burst of more than that.
type pacer struct {
	every time.Duration

	mu   sync.Mutex
	next time.Time // the next slot free
}

// maxPaceDebt bounds the slots a pacer makes up.
const maxPaceDebt = 50 * time.Millisecond

// newPacer is a pacer of rate requests a second; nil (no pacing) for a
// rate ≤ 0.
func newPacer(rate float64) *pacer {
	if rate <= 0 {
		return nil
	}
	return &pacer{every: time.Duration(float64(time.Second) / rate)}
}

// wait takes the next slot and sleeps until it; false if stop closed
// first.
func (p *pacer) wait(stop <-chan struct{}) bool {
	p.mu.Lock()
	now := time.Now()
	slot := p.next
	if oldest := now.Add(-maxPaceDebt); slot.Before(oldest) {
		slot = oldest
	}
	p.next = slot.Add(p.every)
	p.mu.Unlock()
	d := time.Until(slot)
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
