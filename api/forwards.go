package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Forwarded lifecycle events (docs/scaling.md, "Load shares"). A replica of
// --load-deltas snapshots holds only its own requests, so a lifecycle event
// posted to a replica that did not decide the request is unknown there. With
// WithForwardEvents that replica appends it to the forwards topic, keyed by
// the request id, and answers 202 with forwarded: true. Every replica reads
// the whole topic (RunForwards) in a consumer group of its own; the one
// that holds the request appends the outcome and its load delta exactly as
// if the event had been posted to it (lifecycleRecords), and the others
// skip it.
//
// Delivery is at least once: an offset is committed only after its record
// was handled, so a replica that stops between its append and its commit
// appends the outcome again when it restarts. That is harmless: a
// request's lifecycle facts keep the latest time of each kind
// (statestore's noteEvent), so a repeated prefill_done or completed
// releases nothing twice (TestRepeatedLifecycleReleasesOnce).

// Results of pdrouter_forwarded_events_total.
const (
	// The receiving replica appended the forward.
	forwardSent = "sent"
	// This replica decided the request and appended its outcome.
	forwardApplied = "applied"
	// This replica holds no decision for the request: a peer's, or none.
	forwardNotMine = "not_mine"
	// The record is no valid forward: skipped.
	forwardInvalid = "invalid"
	// An append failed: the receiving replica's (answered 503), or the
	// deciding replica's (retried until it succeeds, each failure counted;
	// a record that can never be appended is skipped).
	forwardFailed = "failed"
)

func newForwardMetrics(reg prometheus.Registerer) *prometheus.CounterVec {
	m := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdrouter_forwarded_events_total",
		Help: "Lifecycle events forwarded between replicas of --load-deltas snapshots, by result: sent (posted here for a request this replica did not decide, appended to forwards), applied (read from forwards for a request this replica decided, its outcome appended), not_mine (read for a request this replica holds no decision for), invalid (a record that is no valid forward, skipped) and failed (an append that failed: answered 503 on the receiving replica; retried on the deciding one).",
	}, []string{"result"})
	for _, r := range []string{forwardSent, forwardApplied, forwardNotMine, forwardInvalid, forwardFailed} {
		m.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m)
	}
	return m
}

// forwardEvent appends a lifecycle event for a request this replica holds
// no decision for to the forwards topic, and answers 202 with the record's
// offset. The event time is this replica's clock now, as the outcome's
// would have been had the event been posted to the deciding replica. The
// record is keyed by the request id, not a worker: it is in no cell, and
// every replica reads every partition of the topic.
func (s *Server) forwardEvent(c *gin.Context, id string, kind pb.OutcomeEvent_Kind, m lifecycleMeasures) {
	f := &pb.ForwardedEvent{RequestId: id, Kind: kind, TtftMs: m.ttftMs, ItlMsMean: m.itlMsMean, OutputTokens: m.outputTokens,
		EventTimeUnixNano: s.cfg.now().UnixNano(), ForwardedBy: s.cfg.replicaID}
	r, err := events.NewRecord(s.deps.Names, []byte(id), f)
	if err != nil {
		fail(c, unprocessable("invalid_record", "", err.Error()))
		return
	}
	pos, err := s.appendLog(c.Request.Context(), r)
	if err != nil {
		s.forwards.WithLabelValues(forwardFailed).Inc()
		fail(c, err)
		return
	}
	s.forwards.WithLabelValues(forwardSent).Inc()
	s.cfg.log.Debug("lifecycle event forwarded", "request_id", id, "kind", kind.String())
	c.JSON(http.StatusAccepted, gin.H{"forwarded": true, "offsets": offsetsBody(pos)})
}

// ForwardGroup is the consumer group of a replica's forward reader: its
// own, so that every replica reads every forward, and named by its
// --replica-id, so that a restarted replica resumes where it committed.
func ForwardGroup(names events.Names, replicaID string) string {
	return names.Prefix + "pdrouter-forwards-" + replicaID
}

// ForwardReaderOpts are the options of the client RunForwards reads with:
// every partition of forwards in the replica's own group, offsets
// committed by RunForwards alone, after each record was handled. A group
// with no committed offset starts at the topic's start (an hour): a
// forward appended before the reader joined, for a decision this replica
// made meanwhile, is then still read.
func ForwardReaderOpts(names events.Names, replicaID string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(ForwardGroup(names, replicaID)),
		kgo.ConsumeTopics(names.Physical(events.TopicForwards)),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
}

// forwardRetry bounds the wait between two attempts to append a forwarded
// event's outcome when the log refuses it.
const (
	forwardRetryMin = 100 * time.Millisecond
	forwardRetryMax = 5 * time.Second
)

// RunForwards reads forwarded lifecycle events with cl (a client of
// ForwardReaderOpts) until ctx ends, and applies those of requests this
// replica decided. It starts once the state has caught up with the log as
// of the replica's start (Deps.Started): until then a restarted replica
// may not hold its own requests yet (they are read back from its own
// partition of load-deltas), and would take a forward of one for a peer's.
// A decision made since is held from before it was answered
// (RecordLocalDecisionAt runs before the answer), so no client can post
// an event for it earlier. Each poll's records are handled in order and
// their offsets committed after them.
func (s *Server) RunForwards(ctx context.Context, cl *kgo.Client) error {
	if err := s.waitStarted(ctx); err != nil {
		return nil
	}
	warn := &everyLog{log: s.cfg.log, every: 10 * time.Second}
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		failed := false
		fs.EachError(func(topic string, p int32, err error) {
			failed = true
			warn.warn("reading forwarded lifecycle events", "topic", topic, "partition", p, "err", err)
		})
		if failed && fs.Empty() {
			// A poll that brought errors alone (the group cannot join,
			// the topic is gone) is not retried at once.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(forwardRetryMax):
			}
			continue
		}
		var handled []*kgo.Record
		stopped := false
		for it := fs.RecordIter(); !it.Done() && !stopped; {
			r := it.Next()
			if stopped = !s.handleForward(ctx, r, warn); !stopped {
				handled = append(handled, r)
			}
		}
		if len(handled) > 0 {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if err := cl.CommitRecords(cctx, handled...); err != nil {
				// The records are handled; a later commit covers them, and
				// a restart before it handles them again (at least once).
				warn.warn("committing forwarded lifecycle events", "err", err)
			}
			cancel()
		}
		if stopped {
			return nil
		}
	}
}

// waitStarted returns once Deps.Started says the state has caught up, or
// ctx's error.
func (s *Server) waitStarted(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for s.deps.Started != nil && !s.deps.Started.CaughtUp() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// handleForward handles one record of forwards: a valid forward of a
// request this replica decided is appended as its outcome, retried while
// the log refuses it; anything else is counted and skipped, never retried,
// so no record stops the reader. It returns false only when ctx ended
// before the record was handled.
func (s *Server) handleForward(ctx context.Context, r *kgo.Record, warn *everyLog) bool {
	env, err := events.Decode(s.deps.Names, r)
	f, ok := (*pb.ForwardedEvent)(nil), false
	if err == nil {
		f, ok = env.Message.(*pb.ForwardedEvent)
	}
	if !ok {
		s.forwards.WithLabelValues(forwardInvalid).Inc()
		warn.warn("skipping an invalid forwarded lifecycle event", "partition", r.Partition, "offset", r.Offset, "reason", events.Reason(err), "err", err)
		return true
	}
	m := lifecycleMeasures{ttftMs: f.TtftMs, itlMsMean: f.ItlMsMean, outputTokens: f.OutputTokens}
	recs, err := s.lifecycleRecords(f.GetRequestId(), f.GetKind(), m, f.GetEventTimeUnixNano())
	if isUnknownRequest(err) {
		s.forwards.WithLabelValues(forwardNotMine).Inc()
		s.cfg.log.Debug("forwarded lifecycle event for a request this replica did not decide", "request_id", f.GetRequestId(), "forwarded_by", f.GetForwardedBy())
		return true
	}
	if err != nil {
		// The outcome breaks a record rule (its event time a minute past
		// this replica's clock: the forwarder's clock is ahead): no retry
		// can write it.
		s.forwards.WithLabelValues(forwardFailed).Inc()
		warn.warn("a forwarded lifecycle event cannot be applied; skipped", "request_id", f.GetRequestId(), "forwarded_by", f.GetForwardedBy(), "err", err)
		return true
	}
	for wait := forwardRetryMin; ; wait = min(2*wait, forwardRetryMax) {
		_, err := s.appendInCell(ctx, recs...)
		if err == nil {
			s.forwards.WithLabelValues(forwardApplied).Inc()
			s.cfg.log.Debug("forwarded lifecycle event applied", "request_id", f.GetRequestId(), "kind", f.GetKind().String(), "forwarded_by", f.GetForwardedBy())
			return true
		}
		s.forwards.WithLabelValues(forwardFailed).Inc()
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable {
			warn.warn("a forwarded lifecycle event cannot be applied; skipped", "request_id", f.GetRequestId(), "err", err)
			return true
		}
		warn.warn("appending a forwarded lifecycle event failed; retrying", "request_id", f.GetRequestId(), "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
}

// everyLog logs a warning at most once per every, and says how many it
// left out since: a broker that refuses every append must not flood the
// log with one line a record.
type everyLog struct {
	log     *slog.Logger
	every   time.Duration
	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (l *everyLog) warn(msg string, args ...any) {
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.dropped++
		l.mu.Unlock()
		return
	}
	dropped := l.dropped
	l.last, l.dropped = now, 0
	l.mu.Unlock()
	l.log.Warn(msg, append(args, "warnings_left_out", dropped)...)
}
