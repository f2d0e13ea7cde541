package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

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

// recordReadTimeout bounds one read of a record from the decisions topic:
// a lookup waits for one fetch, never for a broker that does not answer.
const recordReadTimeout = 10 * time.Second

// wholeDecision returns the whole record of a decision the state holds:
// the record itself when it is complete, else the record at its position
// on the decisions topic, checked to be that decision.
func (s *Server) wholeDecision(ctx context.Context, sd StoredDecision) (*pb.DecisionRecord, error) {
	if sd.Complete {
		return sd.Record, nil
	}
	id := sd.Record.GetDecisionId()
	if s.deps.Records == nil || sd.Partition < 0 {
		return nil, unavailable("decision_record_unavailable", "this replica keeps the header of decision "+id+
			" and cannot read its whole record from the decisions topic (no reader configured); pdrouter log tail decisions has it", 1)
	}
	ctx, cancel := context.WithTimeout(ctx, recordReadTimeout)
	defer cancel()
	rec, err := s.deps.Records.ReadDecision(ctx, sd.Partition, sd.Offset)
	if err == nil && rec.GetDecisionId() != id {
		err = fmt.Errorf("%w: decision %q, not %q", ErrNotTheRecord, rec.GetDecisionId(), id)
	}
	switch {
	case errors.Is(err, ErrRecordGone):
		s.metrics.recordReads.WithLabelValues("gone").Inc()
		return nil, &Error{Status: http.StatusGone, Code: "decision_record_gone",
			Message: fmt.Sprintf("decision %s is within this replica's --decision-retention, but its record at decisions partition %d offset %d is no longer on the topic (the topic's retention is shorter); its header: mode %s, decode worker %s, reason %s",
				id, sd.Partition, sd.Offset, sd.Record.GetMode(), refString(sd.Record.GetDecodeWorker()), sd.Record.GetReason())}
	case errors.Is(err, ErrNotTheRecord):
		s.metrics.recordReads.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("decision %s at decisions partition %d offset %d: %w (the replica's store does not match its topic: recreated under the same name?)",
			id, sd.Partition, sd.Offset, err)
	case err != nil:
		// The cause (broker addresses and all) goes to the log, not to the
		// caller.
		s.metrics.recordReads.WithLabelValues("error").Inc()
		s.cfg.log.Warn("reading a decision record from the decisions topic", "decision_id", id, "partition", sd.Partition, "offset", sd.Offset, "err", err)
		return nil, unavailable("decision_log_unavailable", fmt.Sprintf("decision %s: its record at decisions partition %d offset %d could not be read from the decisions topic; retry, or see the router's log", id, sd.Partition, sd.Offset), 1)
	}
	s.metrics.recordReads.WithLabelValues("ok").Inc()
	return rec, nil
}

// LogDecisionReader reads decision records from the decisions topic of a
// Kafka cluster (Deps.Records).
type LogDecisionReader struct {
	reader *logread.Reader
	names  events.Names
}

// NewLogDecisionReader reads the decisions topic named by names through cl,
// which the caller owns and closes.
func NewLogDecisionReader(cl *kgo.Client, names events.Names) *LogDecisionReader {
	return &LogDecisionReader{reader: logread.New(cl), names: names}
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
