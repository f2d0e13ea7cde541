package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/logread"
)

// ErrRecordGone: the decisions topic no longer holds a record this replica
// still has the header of, because the topic's retention is shorter than
// --decision-retention (or its records were deleted).
var ErrRecordGone = errors.New("the decisions topic no longer holds this record")

// ErrNotTheRecord: the decisions topic holds, at a stored decision's
// position, something else than that decision (a record that does not
// decode as one, or another decision): the replica's store and its topic
// disagree, for example after a topic was recreated under the same name.
// Reading again does not help, so it is a 500, never a 503.
var ErrNotTheRecord = errors.New("the decisions topic holds another record at this decision's position")

// ErrRecordNotFound: the decisions topic holds the records around a
// decision's decided_at on its decode worker's partition, and none is the
// decision. The replica's state and its topic disagree (a topic recreated,
// its partitions grown, a writer's clock far ahead): searching again finds
// the same, so it is a 500, never a 503.
var ErrRecordNotFound = errors.New("the decisions topic does not hold this decision's record where its decode worker and decided_at place it")

// ErrSearchLimit: a search for a decision's record read as many records or
// bytes as it may before it found the record or left its time window. The
// record may lie further on; the deciding replica knows its position.
var ErrSearchLimit = errors.New("the search of the decisions topic reached its bounds before it found this record")

// recordReadTimeout bounds one read or search of a record on the decisions
// topic: a lookup waits for a few fetches, never for a broker that does not
// answer.
const recordReadTimeout = 10 * time.Second

// The lookup label of pdrouter_decision_record_reads_total: how the record
// was located.
const (
	lookupPosition = "position" // read at the position the state holds
	lookupSearch   = "search"   // searched by decode worker and decided_at
)

// wholeDecision returns the whole record of a decision the state holds:
// the record itself when it is complete, else the record at its position on
// the decisions topic or, when the state holds no position (a peer's
// decision known from its load delta), the record its header's decode
// worker and decided_at locate; either is checked to be that decision.
func (s *Server) wholeDecision(ctx context.Context, sd StoredDecision) (*pb.DecisionRecord, error) {
	if sd.Complete {
		return sd.Record, nil
	}
	id := sd.Record.GetDecisionId()
	worker := sd.Record.GetDecodeWorker().GetWorkerId()
	decidedAt := time.Unix(0, sd.Record.GetDecidedAtUnixNano())
	search := sd.Partition < 0
	if s.deps.Records == nil || (search && (worker == "" || sd.Record.GetDecidedAtUnixNano() <= 0)) {
		return nil, unavailable("decision_record_unavailable", "this replica keeps the header of decision "+id+
			" and cannot read its whole record from the decisions topic (no reader configured, or neither its position nor its decode worker and decided_at known); pdrouter log tail decisions has it", 1)
	}
	ctx, cancel := context.WithTimeout(ctx, recordReadTimeout)
	defer cancel()
	var rec *pb.DecisionRecord
	var err error
	lookup, where := lookupPosition, fmt.Sprintf("at decisions partition %d offset %d", sd.Partition, sd.Offset)
	if search {
		lookup = lookupSearch
		where = fmt.Sprintf("on the decisions partition of decode worker %s near %s", worker, decidedAt.UTC().Format(time.RFC3339Nano))
		rec, err = s.deps.Records.FindDecision(ctx, id, worker, decidedAt)
	} else {
		rec, err = s.deps.Records.ReadDecision(ctx, sd.Partition, sd.Offset)
	}
	if err == nil && rec.GetDecisionId() != id {
		err = fmt.Errorf("%w: decision %q, not %q", ErrNotTheRecord, rec.GetDecisionId(), id)
	}
	reads := s.metrics.recordReads.MustCurryWith(prometheus.Labels{"lookup": lookup})
	switch {
	case errors.Is(err, ErrRecordGone):
		reads.WithLabelValues("gone").Inc()
		return nil, &Error{Status: http.StatusGone, Code: "decision_record_gone",
			Message: fmt.Sprintf("decision %s is within this replica's --decision-retention, but its record %s is no longer on the topic (the topic's retention is shorter); its header: mode %s, decode worker %s, reason %s",
				id, where, sd.Record.GetMode(), refString(sd.Record.GetDecodeWorker()), sd.Record.GetReason())}
	case errors.Is(err, ErrNotTheRecord):
		reads.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("decision %s %s: %w (the replica's store does not match its topic: recreated under the same name?)", id, where, err)
	case errors.Is(err, ErrRecordNotFound):
		reads.WithLabelValues("not_found").Inc()
		return nil, fmt.Errorf("decision %s %s: %w", id, where, err)
	case errors.Is(err, ErrSearchLimit):
		reads.WithLabelValues("limit").Inc()
		s.cfg.log.Warn("searching the decisions topic for a decision record", "decision_id", id, "decode_worker", worker, "decided_at", decidedAt, "err", err)
		return nil, unavailable("decision_record_unavailable", fmt.Sprintf("decision %s: this replica searched for its record %s within its bounds and did not reach it; the replica that made the decision, or pdrouter log tail decisions, has it", id, where), 1)
	case err != nil:
		// The cause (broker addresses and all) goes to the log, not to the
		// caller.
		reads.WithLabelValues("error").Inc()
		s.cfg.log.Warn("reading a decision record from the decisions topic", "decision_id", id, "lookup", lookup, "partition", sd.Partition, "offset", sd.Offset, "err", err)
		return nil, unavailable("decision_log_unavailable", fmt.Sprintf("decision %s: its record %s could not be read from the decisions topic; retry, or see the router's log", id, where), 1)
	}
	reads.WithLabelValues("ok").Inc()
	return rec, nil
}

// LogDecisionReader reads decision records from the decisions topic of a
// Kafka cluster (Deps.Records).
type LogDecisionReader struct {
	reader *logread.Reader
	client *kgo.Client
	names  events.Names

	// mu guards the retention Retention read last, and when.
	mu          sync.Mutex
	retention   time.Duration
	retentionAt time.Time
}

// NewLogDecisionReader reads the decisions topic named by names through cl,
// which the caller owns and closes.
func NewLogDecisionReader(cl *kgo.Client, names events.Names) *LogDecisionReader {
	return &LogDecisionReader{reader: logread.New(cl), client: cl, names: names}
}

// ReadDecision implements DecisionReader.
func (r *LogDecisionReader) ReadDecision(ctx context.Context, partition int32, offset int64) (*pb.DecisionRecord, error) {
	rec, err := r.reader.Read(ctx, r.names.Physical(events.TopicDecisions), partition, offset)
	switch {
	case errors.Is(err, logread.ErrGone):
		return nil, fmt.Errorf("%w: %w", ErrRecordGone, err)
	case errors.Is(err, logread.ErrNoRecord), errors.Is(err, logread.ErrNotYet):
		// A committed decision's record was on the topic: a position with
		// no record, or past the end, is another topic's.
		return nil, fmt.Errorf("%w: %w", ErrNotTheRecord, err)
	}
	if err != nil {
		return nil, err
	}
	return r.decode(rec)
}

// FindDecision implements DecisionReader. The record is keyed by its
// decode worker (decisionLogRecord), so franz-go's default partitioner put
// it on the partition logread.KeyPartition names, and it is stamped with
// its decided_at (newDecisionRecord): logread.FindNear searches from there,
// within its default bounds (a minute after decided_at, 10,000 records,
// 16 MiB). Only the records of the same decode worker are decoded.
func (r *LogDecisionReader) FindDecision(ctx context.Context, id, decodeWorker string, decidedAt time.Time) (*pb.DecisionRecord, error) {
	topic := r.names.Physical(events.TopicDecisions)
	n, err := r.reader.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	key := events.WorkerKey(decodeWorker)
	p, err := logread.KeyPartition(key, n)
	if err != nil {
		return nil, err
	}
	var scanned int
	return r.findIn(ctx, topic, p, id, decidedAt, func(rec *kgo.Record) bool { return bytes.Equal(rec.Key, key) },
		logread.ScanLimits{After: events.MaxEventSkew}, &scanned)
}

// SearchDecision implements DecisionReader. Without the decode worker, the
// partition is unknown: every partition is searched in turn, each with
// logread.FindNear and lim, until one holds the record. A record is decoded
// only when its bytes hold the id (a decision's id is a plain string field
// of its record), so the records of other decisions cost a byte search,
// not a decode.
//
// A partition that reached its end before the end of the time window holds
// nothing more of that time: it counts as searched. The answer wraps
// ErrSearchLimit when a partition reached lim, or ctx ended, before the
// record was found; else ErrRecordGone when a partition no longer holds the
// records of at; else ErrRecordNotFound. scanned counts the records offered
// to the match, over every partition, whatever the answer.
func (r *LogDecisionReader) SearchDecision(ctx context.Context, id string, at time.Time, lim logread.ScanLimits) (rec *pb.DecisionRecord, scanned int, err error) {
	defer func() {
		// The search's deadline, or its caller gone: a bound too.
		if err != nil && ctx.Err() != nil && !errors.Is(err, ErrSearchLimit) {
			err = fmt.Errorf("%w (%w): %w", ErrSearchLimit, ctx.Err(), err)
		}
	}()
	topic := r.names.Physical(events.TopicDecisions)
	n, err := r.reader.Partitions(ctx, topic)
	if err != nil {
		return nil, 0, err
	}
	needle := []byte(id)
	holdsID := func(rec *kgo.Record) bool { return bytes.Contains(rec.Value, needle) }
	var limited, gone error
	for p := range n {
		rec, err := r.findIn(ctx, topic, p, id, at, holdsID, lim, &scanned)
		switch {
		case err == nil:
			return rec, scanned, nil
		case errors.Is(err, ErrRecordNotFound), errors.Is(err, logread.ErrNotYet):
		case errors.Is(err, ErrSearchLimit):
			limited = err
		case errors.Is(err, ErrRecordGone):
			gone = err
		default:
			return nil, scanned, err
		}
	}
	switch {
	case limited != nil:
		return nil, scanned, limited
	case gone != nil:
		return nil, scanned, gone
	}
	return nil, scanned, fmt.Errorf("%w: none of the %d partitions of %s holds it near %s", ErrRecordNotFound, n, topic, at.UTC().Format(time.RFC3339Nano))
}

// findIn returns decision id's record from partition p of topic, searched
// by logread.FindNear near at within lim. keep tells, cheaply, the records
// that may be it: only those are decoded. scanned counts every record
// offered. Its errors wrap ErrRecordGone, ErrRecordNotFound or
// ErrSearchLimit for FindNear's ErrGone, ErrNotFound and ErrScanLimit, and
// keep FindNear's error in their chain.
func (r *LogDecisionReader) findIn(ctx context.Context, topic string, p int32, id string, at time.Time, keep func(*kgo.Record) bool, lim logread.ScanLimits, scanned *int) (*pb.DecisionRecord, error) {
	var found *pb.DecisionRecord
	_, err := r.reader.FindNear(ctx, topic, p, at, func(rec *kgo.Record) bool {
		*scanned++
		if !keep(rec) {
			return false
		}
		// A record that does not decode is skipped like any other
		// decision: it cannot be the one sought, nor stop the search.
		if d, err := r.decode(rec); err == nil && d.GetDecisionId() == id {
			found = d
		}
		return found != nil
	}, lim)
	switch {
	case err == nil:
		return found, nil
	case errors.Is(err, logread.ErrGone):
		return nil, fmt.Errorf("%w: %w", ErrRecordGone, err)
	case errors.Is(err, logread.ErrNotFound):
		return nil, fmt.Errorf("%w: %w", ErrRecordNotFound, err)
	case errors.Is(err, logread.ErrScanLimit):
		return nil, fmt.Errorf("%w: %w", ErrSearchLimit, err)
	}
	return nil, err
}

// retentionTTL is how long Retention trusts the retention.ms it read: a
// topic's retention changes rarely, and a search must not cost a
// DescribeConfigs request each.
const retentionTTL = time.Minute

// Retention implements DecisionReader: the decisions topic's retention.ms,
// read from the cluster and kept for retentionTTL. A topic without a time
// bound (retention.ms -1) gives 0.
func (r *LogDecisionReader) Retention(ctx context.Context) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.retentionAt.IsZero() && time.Since(r.retentionAt) < retentionTTL {
		return r.retention, nil
	}
	topic := r.names.Physical(events.TopicDecisions)
	rcs, err := kadm.NewClient(r.client).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, err
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return 0, fmt.Errorf("describe %s: %w", topic, err)
	}
	var keep time.Duration
	for _, c := range rc.Configs {
		if c.Key != "retention.ms" || c.Value == nil {
			continue
		}
		ms, err := strconv.ParseInt(*c.Value, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: retention.ms %q: %w", topic, *c.Value, err)
		}
		if ms > 0 && ms < math.MaxInt64/int64(time.Millisecond) {
			keep = time.Duration(ms) * time.Millisecond
		}
	}
	r.retention, r.retentionAt = keep, time.Now()
	return keep, nil
}

// decode returns the decision record rec holds, or an error wrapping
// ErrNotTheRecord.
func (r *LogDecisionReader) decode(rec *kgo.Record) (*pb.DecisionRecord, error) {
	env, err := events.Decode(r.names, rec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotTheRecord, err)
	}
	d, ok := env.Message.(*pb.DecisionRecord)
	if !ok {
		return nil, fmt.Errorf("%w: not a decision record", ErrNotTheRecord)
	}
	return d, nil
}
