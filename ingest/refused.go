package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/rejects"
	"github.com/pdrouter/pdrouter/internal/textcut"
)

// A record the broker refuses for what it is (too large for the topic, a
// policy, a bad timestamp) must not stop ingest: every later record of
// every worker would be lost with it, and one engine batch could then take
// the whole fleet's KV events down. Dropping it silently is no better: a
// replica would keep routing on a state that lacks the batch (a removal it
// never saw is a cache hit that is gone). So a refused kv-events record is
// followed by a SourceReset of its worker, and replicas drop what they know
// of that worker until new events rebuild it.

// origin is what a kv-events record carries in its Kafka context, for the
// reset that repairs it if the broker refuses it.
type origin struct {
	worker string // the record key
	ref    *pb.WorkerRef
	source *pb.KvSource
	reset  bool // the record is itself a repair reset
}

type originKey struct{}

func withOrigin(ctx context.Context, kv *pb.KvEventRecord, reset bool) context.Context {
	return context.WithValue(ctx, originKey{}, origin{worker: kv.GetWorker().GetWorkerId(), ref: kv.GetWorker(), source: kv.GetSource(), reset: reset})
}

func originOf(r *kgo.Record) (origin, bool) {
	if r.Context == nil {
		return origin{}, false
	}
	o, ok := r.Context.Value(originKey{}).(origin)
	return o, ok
}

// refusalReason classifies a produce error: the rejects reason when the
// broker refused this record (the next one may go through), ok=false when
// the error says nothing more can be written.
func refusalReason(err error) (reason string, ok bool) {
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return rejectTooLarge, true
	case errors.Is(err, kerr.InvalidRecord), errors.Is(err, kerr.CorruptMessage), errors.Is(err, kerr.PolicyViolation),
		errors.Is(err, kerr.InvalidTimestamp), errors.Is(err, kerr.UnsupportedForMessageFormat):
		return rejectRefused, true
	}
	return "", false
}

// refused handles a record the client failed for good.
func (s *KafkaSink) refused(r *kgo.Record, err error) {
	reason, perRecord := refusalReason(err)
	if !perRecord {
		_ = s.stop(r, err)
		return
	}
	s.metrics.ProduceErrors.WithLabelValues(r.Topic).Inc()
	s.metrics.Rejects.Inc(rejects.Produce, reason)
	o, isKv := originOf(r)
	switch {
	case !isKv:
		// A load sample or a registration update: the next scrape writes a
		// newer one, and nothing is derived from the lost one.
		s.log.Warn("kafka refused a record: dropped", "topic", r.Topic, "key", string(r.Key), "bytes", len(r.Value), "err", err)
	case o.reset:
		_ = s.stop(r, fmt.Errorf("the reset that repairs a refused record was refused too: %w", err))
	default:
		s.log.Warn("kafka refused a kv record: dropped, and the worker reset", "topic", r.Topic, "worker", o.worker,
			"seq", o.source.GetSeq(), "bytes", len(r.Value), "err", err)
		what := "a source reset"
		if o.source.Seq != nil {
			what = fmt.Sprintf("the record of batch seq %d", o.source.GetSeq())
		}
		s.repair(o, fmt.Sprintf("kafka refused %s (%s): what it held is lost", what, reason))
	}
}

// repair writes a reset of o's worker, once per worker while one is in
// flight. It runs from a promise, where producing could wait on the very
// promise goroutine that has to drain the buffer, so it produces from a
// goroutine of its own that Flush waits for.
func (s *KafkaSink) repair(o origin, detail string) {
	s.mu.Lock()
	if s.resetting[o.worker] {
		s.mu.Unlock()
		return
	}
	s.resetting[o.worker] = true
	s.mu.Unlock()
	kv := &pb.KvEventRecord{Worker: o.ref, Source: o.source}
	s.resets.Add(1)
	go func() {
		defer s.resets.Done()
		recs, err := s.resetRecords(context.Background(), events.WorkerKey(o.worker), kv, errors.New(detail))
		if err != nil {
			_ = s.stop(nil, fmt.Errorf("ingest: %w", err))
			return
		}
		for _, r := range recs {
			s.cl.Produce(r.Context, r, s.promise)
		}
	}()
}

func (s *KafkaSink) resetDone(worker string) {
	s.mu.Lock()
	delete(s.resetting, worker)
	s.mu.Unlock()
}

// resetRecords is the record that replaces kv, which cannot be written: a
// SourceReset of kv's worker, with the same source but no seq (the batch
// itself is lost).
func (s *KafkaSink) resetRecords(ctx context.Context, key []byte, kv *pb.KvEventRecord, cause error) ([]*kgo.Record, error) {
	src := &pb.KvSource{}
	if kv.GetSource() != nil {
		src = &pb.KvSource{Engine: kv.Source.Engine, Endpoint: kv.Source.Endpoint, Epoch: kv.Source.Epoch, Topic: kv.Source.Topic, IngestId: kv.Source.IngestId}
	}
	seq := kv.GetSource().GetSeq()
	reset := &pb.KvEventRecord{
		Worker:            kv.GetWorker(),
		EventTimeUnixNano: time.Now().UnixNano(),
		Source:            src,
		Events: []*pb.KvEvent{{Event: &pb.KvEvent_SourceReset{SourceReset: &pb.SourceReset{
			Reason: pb.SourceReset_REASON_UNRECOVERABLE_GAP, LastSeq: prev(seq), NextSeq: seq + 1,
			Detail: textcut.Truncate(cause.Error(), maxResetDetail)}}}},
	}
	rec, err := events.NewRecord(s.names, key, reset)
	if err != nil {
		return nil, err
	}
	rec.Context = withOrigin(ctx, reset, true)
	s.metrics.Resets.WithLabelValues(s.metrics.sourceLabel(events.WorkerRank(kv.GetWorker().GetWorkerId(), kv.GetWorker().GetDpRank())), "unrecoverable_gap").Inc()
	return []*kgo.Record{rec}, nil
}

// maxResetDetail bounds a reset's detail: it is for people, and an error
// can quote a whole broker message.
const maxResetDetail = 512
