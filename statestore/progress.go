package statestore

import (
	"log/slog"
	"time"
)

// progress logs long operations (a replay, a rebuild) every interval: the
// records applied, the rate over the interval and the lag still to go, so
// an operator can tell a slow replay from a stuck one. It measures elapsed
// time with the wall clock, which is fine: it never reaches the state.
type progress struct {
	log      *slog.Logger
	every    time.Duration
	start    time.Time
	last     time.Time
	total    int64
	sinceLog int64
}

func newProgress(l *slog.Logger, every time.Duration) *progress {
	now := time.Now()
	return &progress{log: l, every: every, start: now, last: now}
}

func (p *progress) add(n int) { p.total += int64(n); p.sinceLog += int64(n) }

func (p *progress) due() bool { return time.Since(p.last) >= p.every }

// report logs one progress line when records were applied since the last
// one or lag remains. Only catching up is a long operation: while more
// remains than the store applied since the last line (or anything remains
// and nothing was applied: stuck) the line is at info; once caught up, the
// records that keep coming are a debug line, so that an idle replica's log
// stays quiet. The lag alone cannot tell: an idle fleet's load samples
// arrive between a fetch and the lag probe, so a replica that keeps up
// still sees a few records to go.
func (p *progress) report(lag int64) {
	now := time.Now()
	dt := now.Sub(p.last).Seconds()
	if p.sinceLog > 0 || lag > 0 {
		rate := float64(p.sinceLog) / max(dt, 1e-9)
		args := []any{"records", p.total, "records_per_s", int64(rate), "lag", lag}
		if rate > 0 && lag > 0 {
			args = append(args, "eta", (time.Duration(float64(lag)/rate) * time.Second).Round(time.Second))
		}
		if lag > p.sinceLog || lag > 0 && p.sinceLog == 0 {
			p.log.Info("statestore: progress", args...)
		} else {
			p.log.Debug("statestore: applied", args...)
		}
	}
	p.last, p.sinceLog = now, 0
}

func (p *progress) finish() {
	el := time.Since(p.start)
	if el >= p.every {
		p.log.Info("statestore: caught up", "records", p.total, "took", el.Round(time.Millisecond),
			"records_per_s", int64(float64(p.total)/max(el.Seconds(), 1e-9)))
	}
}
