package door

import (
	"context"
	"sync"
	"time"
)

// A worker the door cannot connect to (refused, reset or unroutable before
// any byte was sent) is reported to Deps.Health, which writes a
// connect_refused WorkerHealth record: every replica excludes the worker
// once it applies it, typically before ingest's scrapes would notice. The
// request itself is retried on another worker either way (route). The
// worker is healthy again at the first load sample taken after the
// refusal (a scrape that succeeded) or a recovered record
// (statestore/workerhealth.go).

// reportEvery bounds the reports about one worker: until the record is
// applied, every request routed to a dead worker meets the same refusal,
// and one record says it.
const reportEvery = time.Second

// healthReports remembers when each worker was last reported. Its keys are
// worker ids of decisions (registered workers), not input; entries older
// than reportEvery are dropped as new ones come, so it stays as small as
// the set of workers failing at once.
type healthReports struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// due reports whether worker may be reported now, and notes it.
func (h *healthReports) due(worker string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == nil {
		h.last = map[string]time.Time{}
	}
	if t, ok := h.last[worker]; ok && now.Sub(t) < reportEvery {
		return false
	}
	for w, t := range h.last {
		if now.Sub(t) >= reportEvery {
			delete(h.last, w)
		}
	}
	h.last[worker] = now
	return true
}

// reportUnreachable reports f's worker, in the background: the retry does
// not wait for the record.
func (d *Door) reportUnreachable(ctx context.Context, f *failure) {
	if d.deps.Health == nil || f.worker == "" || !d.health.due(f.worker, d.cfg.now()) {
		return
	}
	worker, detail := f.worker, f.err.Message
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.outcomeTimeout)
		defer cancel()
		if err := d.deps.Health.Unreachable(ctx, worker, detail); err != nil {
			d.metrics.healthReports.WithLabelValues(resultError).Inc()
			d.cfg.log.Error("door: worker health record not appended", "worker", worker, "err", err)
			return
		}
		d.metrics.healthReports.WithLabelValues(resultOK).Inc()
		d.cfg.log.Warn("door: could not connect to a worker; wrote an unhealthy record", "worker", worker, "err", detail)
	}()
}
