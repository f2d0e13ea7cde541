package replay

import (
	"log/slog"
	"time"
)

// Progress logs a long replay or export every few seconds: records done,
// the rate over the last interval, and, when the total is known (it is for a
// window of the log: the offsets are resolved before reading), the share done
// and the estimated time to finish. An operator can then tell a slow replay
// from a stuck one. It reads the wall clock, which is fine: it never reaches
// a decision or a state.
type Progress struct {
	log   *slog.Logger
	what  string
	every time.Duration
	total int64
	start time.Time
	last  time.Time
	done  int64
	since int64
}

// NewProgress starts a progress log for `what`; total ≤ 0 means unknown.
// A nil logger logs nothing. every defaults to 5 s.
func NewProgress(l *slog.Logger, what string, total int64, every time.Duration) *Progress {
	if every <= 0 {
		every = 5 * time.Second
	}
	now := time.Now()
	return &Progress{log: l, what: what, every: every, total: total, start: now, last: now}
}

// SetTotal sets the total once it is known.
func (p *Progress) SetTotal(total int64) {
	if p != nil {
		p.total = total
	}
}

// Add counts n records and logs when a line is due.
func (p *Progress) Add(n int) {
	if p == nil {
		return
	}
	p.done += int64(n)
	p.since += int64(n)
	if now := time.Now(); now.Sub(p.last) >= p.every {
		p.report(now)
	}
}

func (p *Progress) report(now time.Time) {
	if p.log == nil {
		p.last, p.since = now, 0
		return
	}
	rate := float64(p.since) / max(now.Sub(p.last).Seconds(), 1e-9)
	args := []any{"what", p.what, "records", p.done, "records_per_s", int64(rate)}
	if p.total > 0 {
		args = append(args, "total", p.total, "percent", int(100*p.done/max(p.total, 1)))
		if left := p.total - p.done; left > 0 && rate > 0 {
			args = append(args, "eta", (time.Duration(float64(left)/rate*1e3) * time.Millisecond).Round(time.Second))
		}
	}
	p.log.Info("replay: progress", args...)
	p.last, p.since = now, 0
}

// Done logs the summary of an operation that took at least one interval.
func (p *Progress) Done() {
	if p == nil || p.log == nil {
		return
	}
	el := time.Since(p.start)
	if el >= p.every {
		p.log.Info("replay: done", "what", p.what, "records", p.done, "took", el.Round(time.Millisecond),
			"records_per_s", int64(float64(p.done)/max(el.Seconds(), 1e-9)))
	}
}
