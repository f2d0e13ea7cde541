package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// sourceDeps is what every source shares.
type sourceDeps struct {
	sink          Sink
	replayer      Replayer
	metrics       *Metrics
	log           *slog.Logger
	ingestID      string
	replayTimeout time.Duration
}

// sourceSpec names one publisher process (one engine DP rank) and where
// its records go.
type sourceSpec struct {
	Worker   string
	DPRank   uint32
	Engine   pb.Engine
	Endpoint string // the endpoint ingest reads from (connect) or binds (bind)
	Replay   string // the engine's replay ROUTER for this rank; "" if none
}

// inbound is one message for a source, decoded by the reader.
type inbound struct {
	received
	batch *Batch
	err   error
	// reconnected marks the (re)connection of a connect-mode socket, in
	// queue order; it carries no message.
	reconnected bool
}

// source runs the sequence logic of one publisher: it delivers batches in
// seq order, fills gaps by replay, and writes a SourceReset whenever it
// cannot vouch for the worker's state (first contact, restart, hole, an
// undecodable batch). It is driven by one goroutine, so it needs no lock.
type source struct {
	spec    sourceSpec
	deps    sourceDeps
	tracker seqTracker
	epoch   uint64
	label   string // metrics label of the last batch's worker/rank
	// reconnected: the socket reconnected since the last message, so the
	// engine may have restarted even if its seq seems to go on.
	reconnected bool
	ctr         *sourceCounters
}

// sourceCounters are the per-message metric children of one source label,
// resolved once: WithLabelValues hashes its labels and takes a lock on
// every call, and deliver counts once per message and once per event.
type sourceCounters struct {
	label string
	// metric is the label the counters carry: label, or OtherSource past
	// the cap on source labels (Metrics.sourceLabel).
	metric  string
	batches prometheus.Counter
	events  map[string]prometheus.Counter // by event type
}

// counters returns the children for the current label.
func (s *source) counters() *sourceCounters {
	if s.ctr == nil || s.ctr.label != s.label {
		metric := s.deps.metrics.sourceLabel(s.label)
		s.ctr = &sourceCounters{label: s.label, metric: metric, batches: s.deps.metrics.Batches.WithLabelValues(metric),
			events: map[string]prometheus.Counter{}}
	}
	return s.ctr
}

// metricLabel is the source label of the current worker/rank.
func (s *source) metricLabel() string { return s.counters().metric }

func (c *sourceCounters) event(m *Metrics, typ string) prometheus.Counter {
	ctr, ok := c.events[typ]
	if !ok {
		ctr = m.Events.WithLabelValues(c.metric, typ)
		c.events[typ] = ctr
	}
	return ctr
}

func newSource(spec sourceSpec, deps sourceDeps) *source {
	return &source{spec: spec, deps: deps, label: events.WorkerRank(spec.Worker, spec.DPRank)}
}

func decodeInbound(r received, eng pb.Engine) inbound {
	b, err := DecodeBatch(r.msg.Payload, eng)
	return inbound{received: r, batch: b, err: err}
}

// handle processes one live message.
func (s *source) handle(ctx context.Context, in inbound) error {
	if in.reconnected {
		s.reconnected = s.tracker.known
		return nil
	}
	seq := in.msg.Seq
	v := s.tracker.classify(seq)
	if s.reconnected && v != seqRestart {
		// An engine that restarted while the connection was down may
		// already have published past our last seq, and its replay buffer
		// would then answer with the new process's batches: from the seq
		// alone a restart cannot be told from a network blip. Treat it as
		// a restart of unknown cause: reset, and rebuild from the engine's
		// buffer.
		s.reconnected = false
		if err := s.reset(ctx, in, pb.SourceReset_REASON_UNRECOVERABLE_GAP, s.tracker.last, seq,
			fmt.Sprintf("reconnected to %s (last seq %d, now %d): the engine may have restarted", s.spec.Endpoint, s.tracker.last, seq)); err != nil {
			return err
		}
		if err := s.fill(ctx, in, 0, seq); err != nil {
			return err
		}
		return s.deliver(ctx, in, false)
	}
	s.reconnected = false
	switch v {
	case seqFirst:
		// What the state holds for the worker predates this ingest, so it
		// is dropped; the engine's history [0, seq) is then replayed, and
		// only what replay cannot return is a loss.
		if err := s.reset(ctx, in, pb.SourceReset_REASON_FIRST_CONTACT, 0, seq,
			fmt.Sprintf("first message from this source since ingest %s started is seq %d", s.deps.ingestID, seq)); err != nil {
			return err
		}
		if err := s.fill(ctx, in, 0, seq); err != nil {
			return err
		}
	case seqGap:
		s.deps.metrics.Gaps.WithLabelValues(s.metricLabel()).Inc()
		s.deps.log.Info("sequence gap: replaying", "source", s.label, "endpoint", s.spec.Endpoint, "last", s.tracker.last, "got", seq)
		if err := s.fill(ctx, in, s.tracker.last+1, seq); err != nil {
			return err
		}
	case seqRestart:
		last := s.tracker.last
		s.deps.log.Info("sequence went back: the engine restarted", "source", s.label, "endpoint", s.spec.Endpoint, "last", last, "got", seq)
		if err := s.reset(ctx, in, pb.SourceReset_REASON_SEQUENCE_RESTART, last, seq,
			fmt.Sprintf("seq went from %d to %d: the engine restarted", last, seq)); err != nil {
			return err
		}
		if err := s.fill(ctx, in, 0, seq); err != nil {
			return err
		}
	}
	return s.deliver(ctx, in, false)
}

// fill replays [from, to) from the engine. Whatever it cannot return is
// written as an unrecoverable gap, even right after another reset: that
// reset said why the state was dropped, this one that part of the
// engine's history is lost, and pdrouter_ingest_source_resets_total
// {reason="unrecoverable_gap"} counts exactly those losses.
func (s *source) fill(ctx context.Context, live inbound, from, to uint64) error {
	if from >= to {
		return nil
	}
	if s.spec.Replay == "" {
		s.deps.metrics.Replays.WithLabelValues(s.metricLabel(), "unavailable").Inc()
		return s.reset(ctx, live, pb.SourceReset_REASON_UNRECOVERABLE_GAP, prev(from), to,
			fmt.Sprintf("seqs %d..%d missing and the source has no replay endpoint", from, to-1))
	}
	// holed: a gap reset was written for a part the engine no longer holds.
	expected, holed := from, false
	var deliverErr error
	err := s.deps.replayer.Replay(ctx, s.spec.Replay, from, s.deps.replayTimeout, func(m Message) bool {
		if m.Seq >= to {
			return false
		}
		if m.Seq < expected {
			return true // a duplicate: delivered already
		}
		if m.Seq > expected && !holed {
			// The engine's buffer no longer holds [expected, m.Seq).
			holed = true
			if deliverErr = s.reset(ctx, live, pb.SourceReset_REASON_UNRECOVERABLE_GAP, prev(expected), m.Seq,
				fmt.Sprintf("replay from %s starts at seq %d, seqs %d..%d are gone", s.spec.Replay, m.Seq, expected, m.Seq-1)); deliverErr != nil {
				return false
			}
		}
		if len(m.Topic) == 0 {
			m.Topic = live.msg.Topic // older replies carry no topic frame
		}
		in := decodeInbound(received{msg: m, at: time.Now()}, s.spec.Engine)
		if deliverErr = s.deliver(ctx, in, true); deliverErr != nil {
			return false
		}
		expected = m.Seq + 1
		return expected < to
	})
	if deliverErr != nil {
		return deliverErr
	}
	switch {
	case expected >= to && !holed:
		s.deps.metrics.Replays.WithLabelValues(s.metricLabel(), "complete").Inc()
	case err != nil:
		s.deps.metrics.Replays.WithLabelValues(s.metricLabel(), "failed").Inc()
	default:
		s.deps.metrics.Replays.WithLabelValues(s.metricLabel(), "incomplete").Inc()
	}
	if expected < to {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		detail := fmt.Sprintf("replay from %s ended at seq %d, before %d", s.spec.Replay, expected, to)
		if err != nil {
			detail = fmt.Sprintf("replay from %s failed at seq %d (needed up to %d): %v", s.spec.Replay, expected, to-1, err)
		}
		s.deps.log.Warn("gap not recoverable", "source", s.label, "detail", detail)
		if !holed {
			return s.reset(ctx, live, pb.SourceReset_REASON_UNRECOVERABLE_GAP, prev(expected), to, detail)
		}
	}
	return nil
}

func prev(seq uint64) uint64 {
	if seq == 0 {
		return 0
	}
	return seq - 1
}

func (s *source) worker(b *Batch) *pb.WorkerRef {
	rank := s.spec.DPRank
	if b != nil && b.HasDPRank {
		rank = b.DPRank
	}
	s.label = events.WorkerRank(s.spec.Worker, rank)
	return &pb.WorkerRef{WorkerId: s.spec.Worker, DpRank: rank}
}

func (s *source) kvSource(topic []byte, seq *uint64) *pb.KvSource {
	return &pb.KvSource{Engine: s.spec.Engine, Endpoint: s.spec.Endpoint, Seq: seq, Epoch: s.epoch, Topic: string(topic), IngestId: s.deps.ingestID}
}

func (s *source) rawFormat() pb.RawFormat {
	if s.spec.Engine == pb.Engine_ENGINE_SGLANG {
		return pb.RawFormat_RAW_FORMAT_SGLANG_MSGPACK
	}
	return pb.RawFormat_RAW_FORMAT_VLLM_MSGPACK
}

// reset writes a record holding only a SourceReset, and starts a new epoch.
func (s *source) reset(ctx context.Context, at inbound, reason pb.SourceReset_Reason, last, next uint64, detail string) error {
	s.epoch++
	rec := &pb.KvEventRecord{
		Worker:            s.worker(at.batch),
		EventTimeUnixNano: time.Now().UnixNano(),
		Source:            s.kvSource(at.msg.Topic, nil),
		Events: []*pb.KvEvent{{Event: &pb.KvEvent_SourceReset{SourceReset: &pb.SourceReset{
			Reason: reason, LastSeq: last, NextSeq: next, Detail: detail}}}},
	}
	s.deps.metrics.Resets.WithLabelValues(s.metricLabel(), reasonLabel(reason)).Inc()
	s.deps.metrics.Events.WithLabelValues(s.metricLabel(), "source_reset").Inc()
	return s.produce(ctx, rec)
}

func reasonLabel(r pb.SourceReset_Reason) string {
	switch r {
	case pb.SourceReset_REASON_SEQUENCE_RESTART:
		return "sequence_restart"
	case pb.SourceReset_REASON_UNRECOVERABLE_GAP:
		return "unrecoverable_gap"
	case pb.SourceReset_REASON_MANUAL:
		return "manual"
	case pb.SourceReset_REASON_FIRST_CONTACT:
		return "first_contact"
	}
	return "unspecified"
}

// deliver writes one batch (live or replayed) and advances the sequence.
// An undecodable batch is written as a SourceReset with its raw bytes.
func (s *source) deliver(ctx context.Context, in inbound, replayed bool) error {
	seq := in.msg.Seq
	rec := &pb.KvEventRecord{
		Worker: s.worker(in.batch),
		Raw:    &pb.RawPayload{Format: s.rawFormat(), Payload: in.msg.Payload},
	}
	ctr := s.counters()
	ctr.batches.Inc()
	if in.err == nil {
		rec.EventTimeUnixNano = in.batch.TimeUnixNano
		rec.Events = in.batch.Events
		// The bounds every replica applies to the record are checked here,
		// where the batch can still be refused on its own: a record that
		// broke them would fail to be written, and stop ingest.
		if err := events.ValidateAt(rec, time.Now()); err != nil {
			in.err = &DecodeError{Reason: ReasonInvalid, Event: -1, Err: err}
			rec.Worker = s.worker(nil)
		}
	}
	if in.err != nil {
		s.deps.metrics.DecodeErrors.WithLabelValues(ErrorReason(in.err)).Inc()
		s.deps.metrics.Resets.WithLabelValues(s.metricLabel(), "unrecoverable_gap").Inc()
		s.deps.metrics.Events.WithLabelValues(s.metricLabel(), "source_reset").Inc()
		s.deps.log.Warn("undecodable engine batch: resetting the source", "source", s.label, "seq", seq, "err", in.err)
		s.epoch++
		rec.EventTimeUnixNano = time.Now().UnixNano()
		rec.Events = []*pb.KvEvent{{Event: &pb.KvEvent_SourceReset{SourceReset: &pb.SourceReset{
			Reason: pb.SourceReset_REASON_UNRECOVERABLE_GAP, LastSeq: prev(seq), NextSeq: seq + 1,
			Detail: fmt.Sprintf("batch seq %d could not be decoded (its bytes are in raw): %v", seq, in.err)}}}}
	} else {
		for _, d := range in.batch.Demoted {
			s.deps.metrics.Demoted.WithLabelValues(d.Reason).Inc()
		}
		for _, e := range rec.Events {
			ctr.event(s.deps.metrics, eventType(e)).Inc()
		}
	}
	rec.Source = s.kvSource(in.msg.Topic, &seq)
	if replayed {
		s.deps.metrics.Replayed.WithLabelValues(s.metricLabel()).Inc()
	}
	s.tracker.advance(seq)
	if err := s.produce(ctx, rec); err != nil {
		return err
	}
	s.deps.metrics.Lag.Observe(time.Since(in.at).Seconds())
	return nil
}

func (s *source) produce(ctx context.Context, rec *pb.KvEventRecord) error {
	if err := s.deps.sink.Produce(ctx, events.WorkerKey(s.spec.Worker), rec); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return ctx.Err()
		}
		return err
	}
	return nil
}

func eventType(e *pb.KvEvent) string {
	switch e.GetEvent().(type) {
	case *pb.KvEvent_Stored:
		return "stored"
	case *pb.KvEvent_Removed:
		return "removed"
	case *pb.KvEvent_Cleared:
		return "cleared"
	case *pb.KvEvent_SourceReset:
		return "source_reset"
	}
	return "unknown"
}
