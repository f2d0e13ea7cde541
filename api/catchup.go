package api

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/statestore"
)

// StartGate says whether a replica's state has applied the log as it stood
// when the replica started. Until then the state may know only part of the
// fleet, of the requests and of the decisions the log holds, and an answer
// from it (no_workers, unknown_model, unknown_request, ...) would be a
// wrong one, not a late one.
type StartGate interface {
	CaughtUp() bool
	// Remaining is the records still to apply before CaughtUp, or -1 when
	// the log's end is not known yet.
	Remaining() int64
}

// CatchUp is the StartGate of a replica: Run reads the log's end offsets
// once, then follows the materializer's lag until every partition has been
// applied up to that end. It never closes again: later lag (a burst of
// events, a slow broker) makes answers late, not wrong, and /readyz with
// --ready-lag covers it.
type CatchUp struct {
	lag   Lagger
	log   *slog.Logger
	every time.Duration
	// onDone runs once the state has caught up, before done is set.
	onDone func()
	done   atomic.Bool
	left   atomic.Int64
}

var _ StartGate = (*CatchUp)(nil)

// NewCatchUp returns the gate of a replica whose materializer is lag. Run
// it from the replica's start, before the materializer has caught up.
func NewCatchUp(lag Lagger, log *slog.Logger) *CatchUp {
	c := &CatchUp{lag: lag, log: log, every: 200 * time.Millisecond}
	c.left.Store(-1)
	return c
}

// OnCaughtUp sets f, called once when the state has caught up and before
// CaughtUp says so: a check that judges the state as the log stood at
// start-up runs there, before /readyz can answer 200 and a client can
// change the log. Call it before Run.
func (c *CatchUp) OnCaughtUp(f func()) { c.onDone = f }

// CaughtUp implements StartGate.
func (c *CatchUp) CaughtUp() bool { return c.done.Load() }

// Remaining implements StartGate.
func (c *CatchUp) Remaining() int64 { return c.left.Load() }

type partitionKey struct {
	topic     events.Topic
	partition int32
}

// Run waits until the state has caught up, and returns nil then, or
// ctx.Err(). A lag it cannot read (the brokers unreachable, a partition
// without a leader) is retried: the end it waits for must be the whole
// log's.
func (c *CatchUp) Run(ctx context.Context) error {
	start := time.Now()
	tick := time.NewTicker(c.every)
	defer tick.Stop()
	var end map[partitionKey]int64
	lastWarn := start
	for {
		lag, err := c.lag.Lag(ctx)
		switch {
		case err == nil && lag.Unknown == 0 && end == nil:
			end = make(map[partitionKey]int64, len(lag.Partitions))
			for _, p := range lag.Partitions {
				end[partitionKey{p.Topic, p.Partition}] = p.End
			}
			fallthrough
		case err == nil && end != nil:
			if left, ok := remaining(end, lag); ok {
				c.left.Store(left)
				if left == 0 {
					if c.onDone != nil {
						c.onDone()
					}
					c.done.Store(true)
					c.log.Info("the state has caught up with the log as of start", "took", time.Since(start).Round(time.Millisecond))
					return nil
				}
			}
		case time.Since(lastWarn) >= 10*time.Second:
			lastWarn = time.Now()
			c.log.Warn("start-up: the log's end is not known yet; answering not_ready", "err", err, "unknown_partitions", lag.Unknown)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// remaining is the records between what lag says is applied and end, over
// end's partitions; ok is false when lag misses one of them.
func remaining(end map[partitionKey]int64, lag statestore.Lag) (int64, bool) {
	var left int64
	seen := 0
	for _, p := range lag.Partitions {
		e, ok := end[partitionKey{p.Topic, p.Partition}]
		if !ok {
			continue // created after start
		}
		seen++
		left += max(e-p.Applied, 0)
	}
	return left, seen == len(end)
}

// requireCaughtUp answers 503 not_ready, with Retry-After, to calls whose
// answer depends on what the log holds, until the StartGate opens.
func (s *Server) requireCaughtUp(c *gin.Context) {
	if g := s.deps.Started; g != nil && !g.CaughtUp() {
		fail(c, unavailable("not_ready", notCaughtUpMessage(g), 1))
	}
}

func notCaughtUpMessage(g StartGate) string {
	if n := g.Remaining(); n >= 0 {
		return fmt.Sprintf("this replica is replaying the log up to its end as of start (%d records to go); retry, or use a ready replica", n)
	}
	return "this replica has not read the log's end yet; retry, or use a ready replica"
}
