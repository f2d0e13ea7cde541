package ingest

import (
	"context"
	"errors"
	"math"
	"net"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/rejects"
)

// LoadSampleOf turns one rank's scrape into a LoadSample. blockSize is the
// worker's known block size (0: unknown), used to turn SGLang's token
// counts into blocks.
func LoadSampleOf(worker string, l EngineLoad, at time.Time, blockSize uint64) *pb.LoadSample {
	s := &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: worker, DpRank: l.DPRank}, SampleTimeUnixNano: at.UnixNano(), Origin: "scrape"}
	u := func(v *float64) *uint64 {
		if v == nil {
			return nil
		}
		r := uint64(math.Round(*v))
		return &r
	}
	s.NumRequestsRunning, s.NumRequestsWaiting = u(l.Running), u(l.Waiting)
	if l.KvUsage != nil {
		r := min(max(*l.KvUsage, 0), 1)
		s.KvUsageRatio = &r
	}
	if l.BlockSize != nil && *l.BlockSize > 0 {
		blockSize = *l.BlockSize
	}
	switch {
	case l.KvTotalBlocks != nil:
		s.KvTotalBlocks = l.KvTotalBlocks
	case l.MaxTokens != nil && blockSize > 0:
		s.KvTotalBlocks = proto.Uint64(uint64(*l.MaxTokens) / blockSize)
	}
	switch {
	case l.UsedTokens != nil && blockSize > 0:
		s.KvUsedBlocks = proto.Uint64((uint64(*l.UsedTokens) + blockSize - 1) / blockSize)
	case s.KvTotalBlocks != nil && s.KvUsageRatio != nil:
		s.KvUsedBlocks = proto.Uint64(uint64(math.Round(*s.KvUsageRatio * float64(*s.KvTotalBlocks))))
	}
	return s
}

// UpdatedRegistration returns reg with the block size and capacity a scrape
// reported, or nil when nothing changed (so an unchanged engine does not
// rewrite the compacted workers topic every interval). Capacity is the
// rank-0 figure: ranks of one engine are configured alike.
func UpdatedRegistration(reg *pb.WorkerRegistration, loads []EngineLoad, now time.Time) *pb.WorkerRegistration {
	if reg == nil || len(loads) == 0 {
		return nil
	}
	l := loads[0]
	bs := reg.GetBlockSize()
	if l.BlockSize != nil && *l.BlockSize > 0 && *l.BlockSize <= events.MaxBlockSize {
		bs = uint32(*l.BlockSize)
	}
	var total *uint64
	switch {
	case l.KvTotalBlocks != nil:
		total = l.KvTotalBlocks
	case l.MaxTokens != nil && bs > 0:
		total = proto.Uint64(uint64(*l.MaxTokens) / uint64(bs))
	}
	changed := bs != reg.GetBlockSize() || (total != nil && (reg.TotalKvBlocks == nil || *total != reg.GetTotalKvBlocks()))
	if !changed {
		return nil
	}
	n := proto.Clone(reg).(*pb.WorkerRegistration)
	n.BlockSize = bs
	if total != nil {
		n.TotalKvBlocks = total
	}
	n.RegisteredAtUnixNano = now.UnixNano()
	if events.Validate(n) != nil {
		return nil
	}
	return n
}

// scrapeTarget is one worker with a metrics URL.
type scrapeTarget struct {
	worker string
	url    string
}

// runScraper scrapes every known metrics URL each interval, up to
// ScrapeConcurrency at a time, each bounded by ScrapeTimeout: one engine
// that answers slowly, or never, delays its own samples and nobody else's.
// A target whose previous scrape still runs is skipped for this interval
// rather than queued twice.
func (ing *Ingest) runScraper(ctx context.Context) error {
	t := time.NewTicker(ing.cfg.ScrapeInterval)
	defer t.Stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	slots := make(chan struct{}, ing.cfg.ScrapeConcurrency)
	var mu sync.Mutex
	inflight := map[scrapeTarget]bool{}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		targets := ing.scrapeTargets()
		ing.scrapeHealth.keep(targets)
		for _, tg := range targets {
			mu.Lock()
			busy := inflight[tg]
			inflight[tg] = true
			mu.Unlock()
			if busy {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { mu.Lock(); delete(inflight, tg); mu.Unlock() }()
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return
				}
				defer func() { <-slots }()
				if err := ing.scrapeOnce(ctx, tg); err != nil {
					cancel(err)
				}
			}()
		}
		select {
		case <-ctx.Done():
			if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		case <-t.C:
		}
	}
}

func (ing *Ingest) scrapeTargets() []scrapeTarget {
	ing.mu.Lock()
	defer ing.mu.Unlock()
	var out []scrapeTarget
	seen := map[string]bool{}
	for w, r := range ing.running {
		if r.cfg.MetricsURL != "" {
			out = append(out, scrapeTarget{w, r.cfg.MetricsURL})
			seen[w] = true
		}
	}
	for w, reg := range ing.regs {
		if !seen[w] && reg.GetMetricsUrl() != "" {
			out = append(out, scrapeTarget{w, reg.GetMetricsUrl()})
		}
	}
	return out
}

// scrapeOnce scrapes one target and writes its samples; it fails only when
// the sink does (a scrape error is counted and logged).
func (ing *Ingest) scrapeOnce(ctx context.Context, tg scrapeTarget) error {
	if err := ing.allowURL(ctx, tg.url); err != nil {
		ing.metrics.Scrapes.WithLabelValues("error").Inc()
		if errors.Is(err, ErrNotAllowed) {
			ing.metrics.Rejects.Inc(rejects.Scrape, rejectNotAllowed)
			ing.refusedOnce(tg.worker, "metrics_url "+tg.url, err)
		} else {
			ing.log.Debug("scrape failed", "worker", tg.worker, "url", tg.url, "err", err)
		}
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, ing.cfg.ScrapeTimeout)
	loads, err := scrape(sctx, ing.deps.HTTP, tg.url, ing.cfg.ScrapeMaxBytes)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		ing.metrics.Scrapes.WithLabelValues("error").Inc()
		reason := scrapeRejectReason(err)
		if reason != "" {
			ing.metrics.Rejects.Inc(rejects.Scrape, reason)
		}
		if reason == rejectMalformed || reason == rejectScrapeSize || reason == rejectBadStatus {
			// The engine answered, with something that is not its metrics:
			// worth a line at every failure, not only at the transition.
			ing.log.Warn("scrape refused: the engine's /metrics answer is unusable", "worker", tg.worker, "url", tg.url, "reason", reason, "err", err)
		} else {
			ing.log.Debug("scrape failed", "worker", tg.worker, "url", tg.url, "err", err)
		}
		if ing.scrapeHealth.failed(tg.worker, ing.cfg.ScrapeFailuresUnhealthy) {
			return ing.writeHealth(ctx, tg.worker, false, pb.HealthReason_HEALTH_REASON_SCRAPE_FAILED, err.Error())
		}
		return nil
	}
	ing.metrics.Scrapes.WithLabelValues("ok").Inc()
	if ing.scrapeHealth.succeeded(tg.worker) {
		if err := ing.writeHealth(ctx, tg.worker, true, pb.HealthReason_HEALTH_REASON_RECOVERED, ""); err != nil {
			return err
		}
	}
	now := time.Now()
	ing.mu.Lock()
	reg := ing.regs[tg.worker]
	ing.mu.Unlock()
	if len(loads) > 0 && loads[0].BlockSize != nil && (*loads[0].BlockSize == 0 || *loads[0].BlockSize > events.MaxBlockSize) {
		// UpdatedRegistration keeps the registered block size: say why.
		ing.metrics.Rejects.Inc(rejects.Scrape, rejectBlockSize)
		ing.log.Warn("scrape: the engine reports a block size out of range; the registration keeps its own", "worker", tg.worker,
			"url", tg.url, "block_size", *loads[0].BlockSize, "max", events.MaxBlockSize, "registered", reg.GetBlockSize())
	}
	for _, l := range loads {
		if err := ing.sdeps.sink.Produce(ctx, events.WorkerKey(tg.worker), LoadSampleOf(tg.worker, l, now, uint64(reg.GetBlockSize()))); err != nil {
			return err
		}
	}
	if n := UpdatedRegistration(reg, loads, now); n != nil {
		if err := ing.sdeps.sink.Produce(ctx, events.WorkerKey(tg.worker), n); err != nil {
			return err
		}
		ing.mu.Lock()
		ing.regs[tg.worker] = n
		ing.mu.Unlock()
		ing.log.Info("registration updated from the engine's metrics", "worker", tg.worker,
			"block_size", n.GetBlockSize(), "total_kv_blocks", n.GetTotalKvBlocks())
	}
	return nil
}

// scrapeRejectReason is the rejects reason of a failed scrape, or "" when
// the failure is the network's (refused, reset), not the engine's answer.
func scrapeRejectReason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, ErrNotAllowed):
		return rejectNotAllowed
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return rejectTimeout
	case errors.Is(err, errScrapeTooLarge):
		return rejectScrapeSize
	case errors.Is(err, errScrapeStatus):
		return rejectBadStatus
	case errors.Is(err, errScrapeMalformed):
		return rejectMalformed
	}
	return ""
}
