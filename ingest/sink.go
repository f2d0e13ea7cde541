package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/rejects"
)

// Sink takes finished records. Produce blocks while the sink is full, so a
// slow Kafka slows the ZMQ readers down instead of growing memory (the
// engines' PUB high-water mark then drops, and the gap is replayed). It
// returns an error only when records can no longer be written at all.
type Sink interface {
	Produce(ctx context.Context, key []byte, m proto.Message) error
}

// DefaultMaxRecordBytes is the default of --max-record-bytes, the largest
// record value ingest writes: below Kafka's default max.message.bytes
// (1 MiB) and franz-go's default batch bound (1,000,012 bytes), with room
// for the key, the headers and the batch framing (recordOverheadBytes).
const DefaultMaxRecordBytes = 900 << 10

// recordOverheadBytes bounds what one record adds to its value in a batch
// of its own: the batch header, the record's varints, a worker-id key and
// the schema header.
const recordOverheadBytes = 4 << 10

// ProducerOpts are the options ingest's Kafka client needs besides the
// connection: batches bounded by the record limit, so a batch of small
// records is no bigger than one record at the limit, and a topic whose
// max.message.bytes takes maxRecordBytes plus the overhead takes every
// batch (the broker checks the batch, not the record).
func ProducerOpts(maxRecordBytes int) []kgo.Opt {
	if maxRecordBytes <= 0 {
		maxRecordBytes = DefaultMaxRecordBytes
	}
	return []kgo.Opt{kgo.ProducerBatchMaxBytes(int32(maxRecordBytes + recordOverheadBytes))}
}

// KafkaSink writes records with a franz-go client. The client must use
// franz-go's defaults for delivery: idempotent writes, acks=all, unlimited
// retries of retriable errors; then a record is lost only on an error Kafka
// says is permanent.
//
// A kv-events record bigger than MaxRecordBytes is split (splitKv), so a
// long-context batch reaches the log whole. A record the broker refuses
// anyway (its own limit is lower, a policy) is dropped, counted, and
// followed by a SourceReset for its worker (refused.go): replicas drop the
// worker's blocks rather than keep a state that misses the record. Only an
// error that says nothing can be written any more (authorization, a closed
// client) stops the sink (Err); ingest then exits with it, and on restart
// every source is reset and replayed, so that loss is loud and repaired.
type KafkaSink struct {
	cl      *kgo.Client
	names   events.Names
	metrics *Metrics
	log     *slog.Logger
	// MaxRecordBytes bounds a kv-events record value: over it, the raw
	// payload is left out and the events are split between records.
	MaxRecordBytes int

	mu    sync.Mutex
	fatal error
	// resetting holds the workers whose repair reset is in flight, so a
	// refused batch of many records of one worker costs one reset.
	resetting map[string]bool
	resets    sync.WaitGroup
}

// NewKafkaSink wraps cl, which the caller owns (and flushes and closes).
func NewKafkaSink(cl *kgo.Client, names events.Names, m *Metrics, log *slog.Logger) *KafkaSink {
	// The topics ingest writes are known: their series exist at 0 from the
	// start.
	for _, t := range []events.Topic{events.TopicKvEvents, events.TopicLoad} {
		m.Produced.WithLabelValues(names.Physical(t))
		m.ProduceErrors.WithLabelValues(names.Physical(t))
	}
	return &KafkaSink{cl: cl, names: names, metrics: m, log: log, MaxRecordBytes: DefaultMaxRecordBytes, resetting: map[string]bool{}}
}

// Err returns the permanent error that stopped the sink, if any.
func (s *KafkaSink) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal
}

// Produce validates and frames m (events.NewRecord) and hands it to the
// client, blocking while the client's buffer is full. A kv-events record
// goes out as one or more records (splitKv).
func (s *KafkaSink) Produce(ctx context.Context, key []byte, m proto.Message) error {
	if err := s.Err(); err != nil {
		return err
	}
	recs, err := s.records(ctx, key, m)
	if errors.Is(err, errUnsplittable) {
		kv := m.(*pb.KvEventRecord)
		s.metrics.Rejects.Inc(rejects.Produce, rejectTooLarge)
		s.log.Warn("kv record too large for Kafka even split by blocks: dropping it and resetting the worker",
			"worker", kv.GetWorker().GetWorkerId(), "seq", kv.GetSource().GetSeq(), "limit", s.MaxRecordBytes, "err", err)
		recs, err = s.resetRecords(ctx, key, kv, err)
	}
	if err != nil {
		// A bug in ingest (decoding is meant to make this impossible): stop
		// rather than skip a record.
		return s.stop(nil, fmt.Errorf("ingest: %w", err))
	}
	for _, r := range recs {
		s.cl.Produce(ctx, r, s.promise)
	}
	return nil
}

// records frames m: one record, or the parts of a kv-events record split
// to fit MaxRecordBytes, each carrying what a repair reset needs should the
// broker refuse it.
func (s *KafkaSink) records(ctx context.Context, key []byte, m proto.Message) ([]*kgo.Record, error) {
	kv, ok := m.(*pb.KvEventRecord)
	if !ok {
		rec, err := events.NewRecord(s.names, key, m)
		if err != nil {
			return nil, err
		}
		return []*kgo.Record{rec}, nil
	}
	parts, err := splitKv(kv, s.MaxRecordBytes)
	if err != nil {
		return nil, err
	}
	if len(parts) > 1 {
		s.metrics.Split.Inc()
		s.log.Info("kv record over the size limit: written as several records, without its raw payload",
			"worker", kv.GetWorker().GetWorkerId(), "seq", kv.GetSource().GetSeq(), "records", len(parts), "limit", s.MaxRecordBytes)
	}
	out := make([]*kgo.Record, len(parts))
	for i, p := range parts {
		rec, err := events.NewRecord(s.names, key, p)
		if err != nil {
			return nil, err
		}
		rec.Context = withOrigin(ctx, kv, false)
		out[i] = rec
	}
	return out, nil
}

func (s *KafkaSink) promise(r *kgo.Record, err error) {
	if err == nil {
		s.metrics.Produced.WithLabelValues(r.Topic).Inc()
		if o, ok := originOf(r); ok && o.reset {
			s.resetDone(o.worker)
		}
		return
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return // shutdown: the record was not acknowledged and is replayed on restart
	}
	s.refused(r, err)
}

func (s *KafkaSink) stop(r *kgo.Record, err error) error {
	topic := ""
	if r != nil {
		topic = r.Topic
	}
	s.metrics.ProduceErrors.WithLabelValues(topic).Inc()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fatal == nil {
		s.fatal = fmt.Errorf("ingest: kafka refused a record on %s: %w", topic, err)
		s.log.Error("kafka refused a record for good: stopping ingest", "topic", topic, "err", err)
	}
	return s.fatal
}

// Flush waits until every produced record is acknowledged or failed, and
// so are the resets that repair refused ones.
func (s *KafkaSink) Flush(ctx context.Context) error {
	if err := s.cl.Flush(ctx); err != nil {
		return err
	}
	s.resets.Wait()
	if err := s.cl.Flush(ctx); err != nil {
		return err
	}
	return s.Err()
}
