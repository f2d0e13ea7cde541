package door

import "time"

// measure is one request's timeline as the client sees it: TTFT from its
// arrival to the first token relayed, mean ITL over the gaps between token
// chunks, and output tokens (the engine's usage when it sends one, else
// the token chunks counted).
type measure struct {
	now     func() time.Time
	arrived time.Time
	// upstream: when the first engine request was sent (0 before).
	upstream    time.Time
	first, last time.Time
	chunks      int64
	usage       int64
}

func newMeasure(now func() time.Time) *measure {
	return &measure{now: now, arrived: now(), usage: -1}
}

// sending marks the first request to an engine; it returns the door's
// added latency the first time, and false after.
func (m *measure) sending() (time.Duration, bool) {
	if !m.upstream.IsZero() {
		return 0, false
	}
	m.upstream = m.now()
	return m.upstream.Sub(m.arrived), true
}

// token marks a relayed chunk that carried tokens.
func (m *measure) token() {
	t := m.now()
	if m.chunks == 0 {
		m.first = t
	}
	m.last = t
	m.chunks++
}

// answered marks a whole (non-streamed) answer of n output tokens.
func (m *measure) answered(n int64) {
	m.first = m.now()
	m.last = m.first
	if n >= 0 {
		m.usage = n
	}
}

func (m *measure) started() bool { return !m.first.IsZero() }

func (m *measure) ttft() *time.Duration {
	if m.first.IsZero() {
		return nil
	}
	d := m.first.Sub(m.arrived)
	return &d
}

// itl is the mean gap between token chunks, nil under two chunks.
func (m *measure) itl() *time.Duration {
	if m.chunks < 2 {
		return nil
	}
	d := m.last.Sub(m.first) / time.Duration(m.chunks-1)
	return &d
}

func (m *measure) outputTokens() *uint64 {
	n := m.chunks
	if m.usage >= 0 {
		n = m.usage
	}
	if n == 0 && m.first.IsZero() {
		return nil
	}
	v := uint64(n)
	return &v
}
