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
)

// Sink takes finished records. Produce blocks while the sink is full, so a
// slow Kafka slows the ZMQ readers down instead of growing memory (the
// engines' PUB high-water mark then drops, and the gap is replayed). It
// returns an error only when records can no longer be written at all.
type Sink interface {
	Produce(ctx context.Context, key []byte, m proto.Message) error
}

// DefaultMaxRecordBytes is the largest record value KafkaSink writes as is:
// Kafka's default max.message.bytes (1 MiB) less room for headers and
// batch framing.
const DefaultMaxRecordBytes = 1000 << 10

// KafkaSink writes records with a franz-go client. The client must use
// franz-go's defaults for delivery: idempotent writes, acks=all, unlimited
// retries of retriable errors; then a record is lost only on an error Kafka
// says is permanent, and that stops the sink (Err), because writing later
// records of the same worker past a hole would let replicas keep stale
// blocks. Ingest then exits with the error; on restart every source is
// reset and replayed, so the loss is loud and repaired, never silent.
type KafkaSink struct {
	cl      *kgo.Client
	names   events.Names
	metrics *Metrics
	log     *slog.Logger
	// MaxRecordBytes: a kv-events record over it is written without its raw
	// payload (counted), rather than refused by the broker.
	MaxRecordBytes int

	mu    sync.Mutex
	fatal error
}

// NewKafkaSink wraps cl, which the caller owns (and flushes and closes).
func NewKafkaSink(cl *kgo.Client, names events.Names, m *Metrics, log *slog.Logger) *KafkaSink {
	return &KafkaSink{cl: cl, names: names, metrics: m, log: log, MaxRecordBytes: DefaultMaxRecordBytes}
}

// Err returns the permanent error that stopped the sink, if any.
func (s *KafkaSink) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal
}

// Produce validates and frames m (events.NewRecord) and hands it to the
// client, blocking while the client's buffer is full.
func (s *KafkaSink) Produce(ctx context.Context, key []byte, m proto.Message) error {
	if err := s.Err(); err != nil {
		return err
	}
	rec, err := s.record(key, m)
	if err != nil {
		// A bug in ingest (decoding is meant to make this impossible): stop
		// rather than skip a record.
		return s.stop(rec, fmt.Errorf("ingest: %w", err))
	}
	s.cl.Produce(ctx, rec, s.promise)
	return nil
}

// record is the Kafka record of m: validated and encoded, without its raw
// payload when that would make it too big. The size is that of the encoded
// value (the same as proto.Size), so the common case encodes once and never
// sizes the message apart.
func (s *KafkaSink) record(key []byte, m proto.Message) (*kgo.Record, error) {
	rec, err := events.NewRecord(s.names, key, m)
	kv, ok := m.(*pb.KvEventRecord)
	if !ok || kv.Raw == nil || s.MaxRecordBytes <= 0 || (err == nil && len(rec.Value) <= s.MaxRecordBytes) {
		return rec, err
	}
	size := proto.Size(kv)
	if size <= s.MaxRecordBytes {
		return rec, err // refused for another reason than its size
	}
	s.log.Warn("kv record over the size limit: writing it without its raw payload",
		"worker", kv.GetWorker().GetWorkerId(), "seq", kv.GetSource().GetSeq(), "bytes", size, "limit", s.MaxRecordBytes)
	kv = proto.Clone(kv).(*pb.KvEventRecord)
	kv.Raw.Payload = nil
	return events.NewRecord(s.names, key, kv)
}

func (s *KafkaSink) promise(r *kgo.Record, err error) {
	if err == nil {
		s.metrics.Produced.WithLabelValues(r.Topic).Inc()
		return
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return // shutdown: the record was not acknowledged and is replayed on restart
	}
	_ = s.stop(r, err)
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

// Flush waits until every produced record is acknowledged or failed.
func (s *KafkaSink) Flush(ctx context.Context) error {
	if err := s.cl.Flush(ctx); err != nil {
		return err
	}
	return s.Err()
}
