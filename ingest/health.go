package ingest

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/textcut"
)

// The detection rule of the scraper (design.md, "Worker health"):
//
//   - a worker is unhealthy after ScrapeFailuresUnhealthy scrapes of its
//     metrics URL in a row fail: refused, reset, timed out, an error
//     status, a body over --scrape-max-bytes or one that is not Prometheus
//     text. The scraper then writes one WorkerHealth record
//     (scrape_failed, detail: the last error), and none while the failures
//     go on;
//   - it is healthy again on the first scrape that succeeds after that: one
//     recovered record;
//   - when this process starts it does not know what the log says (an
//     earlier ingest may have marked the worker unhealthy), so the first
//     scrape that succeeds also writes a recovered record. The materializer
//     applies a recovered record of a worker that was not unhealthy as no
//     transition.
//
// With the default 2 failures, a worker killed between two scrapes is
// excluded at the second failed scrape: within 2 scrape intervals (plus
// the scrape timeout when the host stops answering instead of refusing).
// The records are written, never acted on here: every replica excludes the
// worker when it applies the record.

// DefaultScrapeFailuresUnhealthy is the default of
// Config.ScrapeFailuresUnhealthy.
const DefaultScrapeFailuresUnhealthy = 2

// scrapeHealth counts, per worker, the scrapes that failed in a row, and
// what this process last wrote about it.
type scrapeHealth struct {
	mu sync.Mutex
	by map[string]*scrapeCount
}

type scrapeCount struct {
	fails int
	// written: a record of this process says the worker is unhealthy
	// (down) or healthy (!down). Unknown until the first.
	written, down bool
}

// failed notes a failed scrape; it returns true when the worker becomes
// unhealthy with it (a record is to be written).
func (h *scrapeHealth) failed(worker string, after int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.count(worker)
	c.fails++
	if c.fails >= after && !(c.written && c.down) {
		c.written, c.down = true, true
		return true
	}
	return false
}

// succeeded notes a successful scrape; it returns true when a recovered
// record is to be written.
func (h *scrapeHealth) succeeded(worker string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.count(worker)
	c.fails = 0
	if c.written && !c.down {
		return false
	}
	c.written, c.down = true, false
	return true
}

// undo forgets the record last decided for a worker: writing it failed.
func (h *scrapeHealth) undo(worker string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.by[worker]; c != nil {
		c.written = false
	}
}

func (h *scrapeHealth) count(worker string) *scrapeCount {
	if h.by == nil {
		h.by = map[string]*scrapeCount{}
	}
	c := h.by[worker]
	if c == nil {
		c = &scrapeCount{}
		h.by[worker] = c
	}
	return c
}

// keep forgets the workers that are no longer scraped, so the map is as
// large as the fleet, not as every id ever seen.
func (h *scrapeHealth) keep(targets []scrapeTarget) {
	h.mu.Lock()
	defer h.mu.Unlock()
	live := make(map[string]bool, len(targets))
	for _, t := range targets {
		live[t.worker] = true
	}
	for w := range h.by {
		if !live[w] {
			delete(h.by, w)
		}
	}
}

// writeHealth writes one WorkerHealth record about worker.
func (ing *Ingest) writeHealth(ctx context.Context, worker string, healthy bool, reason pb.HealthReason, detail string) error {
	h := &pb.WorkerHealth{WorkerId: worker, Healthy: healthy, Reason: reason, Source: pb.HealthSource_HEALTH_SOURCE_INGEST_SCRAPE,
		ObservedAtUnixNano: time.Now().UnixNano(), Detail: textcut.Truncate(strings.ToValidUTF8(detail, "?"), events.MaxHealthDetailLen),
		Observer: textcut.Truncate(strings.ToValidUTF8(ing.cfg.IngestID, "?"), events.MaxHealthDetailLen)}
	if err := ing.sdeps.sink.Produce(ctx, events.WorkerKey(worker), h); err != nil {
		ing.scrapeHealth.undo(worker)
		return err
	}
	ing.metrics.Health.WithLabelValues(events.HealthReasonLabel(reason)).Inc()
	if healthy {
		ing.log.Info("worker health: scrape succeeds again, wrote a recovered record", "worker", worker)
	} else {
		ing.log.Warn("worker health: scrapes keep failing, wrote an unhealthy record", "worker", worker,
			"failures_in_a_row", ing.cfg.ScrapeFailuresUnhealthy, "err", detail)
	}
	return nil
}
