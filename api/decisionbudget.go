package api

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Every answered decision is a record on the decisions topic, and a record
// over the topic's message limit is refused by the broker on every retry:
// answering 503 "retry" for it would be a lie. So the record is bounded by
// construction: at most recordBudget.maxCandidates table rows
// (decider.KeepRows) and hash chains cut to the bytes the rest leaves
// (events.FitDecisionChains). A record that is still over its budget (a
// budget set below what a record's header needs) is refused with a 413,
// which tells the caller that the same request will never succeed.

// Defaults of the record bounds. 256 rows keep a fleet of 128 decode and 32
// prefill workers whole; 512 KiB is half of Kafka's default
// max.message.bytes (1 MiB), leaving room for the batch framing, the key
// and the header, and for a topic configured a little below the default.
const (
	DefaultDecisionMaxCandidates  = 256
	DefaultDecisionRecordMaxBytes = 512 << 10
)

// Limits of the bounds. A record keeps both pools' picks, so at least 2
// rows; a record's header with a few rows needs a few KiB; and the
// producer's default batch limit (franz-go: 1,000,012 bytes) bounds a
// record from above, less room for its framing.
const (
	MinDecisionMaxCandidates  = 2
	MinDecisionRecordMaxBytes = 4 << 10
	MaxDecisionRecordMaxBytes = 960 << 10
)

// reasonRecordTooLarge counts decisions refused because their record could
// not be brought within the budget.
const reasonRecordTooLarge = "decision_record_too_large"

// recordBudget bounds the decision records the API writes.
type recordBudget struct {
	maxCandidates int
	maxBytes      int
}

func defaultRecordBudget() recordBudget {
	return recordBudget{maxCandidates: DefaultDecisionMaxCandidates, maxBytes: DefaultDecisionRecordMaxBytes}
}

func (b recordBudget) validate() error {
	if b.maxCandidates < MinDecisionMaxCandidates {
		return fmt.Errorf("api: decision max candidates %d: want at least %d (both pools' picks)", b.maxCandidates, MinDecisionMaxCandidates)
	}
	if b.maxBytes < MinDecisionRecordMaxBytes || b.maxBytes > MaxDecisionRecordMaxBytes {
		return fmt.Errorf("api: decision record max bytes %d: want %d to %d", b.maxBytes, MinDecisionRecordMaxBytes, MaxDecisionRecordMaxBytes)
	}
	return nil
}

// WithDecisionMaxCandidates caps the candidate rows a decision record
// keeps (the picked workers and the best ranked others; the record counts
// the rest). Default 256; at least 2.
func WithDecisionMaxCandidates(n int) Option { return func(c *config) { c.budget.maxCandidates = n } }

// WithDecisionRecordMaxBytes caps a decision record's encoded value, in
// bytes: hash chains are cut to fit, and a record that still does not fit
// is refused with 413 decision_record_too_large. Default 512 KiB; 4 KiB to
// 960 KiB.
func WithDecisionRecordMaxBytes(n int) Option { return func(c *config) { c.budget.maxBytes = n } }

// decisionLogRecord frames rec for the decisions topic within the budget,
// cutting its hash chains when the whole record is over it. rec is changed
// in place, so the answer, the local state and the log all see the record
// that was written.
func (s *Server) decisionLogRecord(rec *pb.DecisionRecord) (*kgo.Record, error) {
	key := events.WorkerKey(rec.GetDecodeWorker().GetWorkerId())
	if n := events.DecisionChainsSize(rec); n > s.cfg.budget.maxBytes {
		// Chains alone over the budget (up to 16 MiB for the longest
		// prompt on block_size 1): cut them to the budget before the
		// first encoding, and exactly below.
		events.FitDecisionChains(rec, n, s.cfg.budget.maxBytes)
	}
	r, err := newDecisionRecord(s.deps.Names, key, rec)
	if err != nil || len(r.Value) <= s.cfg.budget.maxBytes {
		return r, err
	}
	whole := len(r.Value)
	events.FitDecisionChains(rec, whole, s.cfg.budget.maxBytes)
	if r, err = newDecisionRecord(s.deps.Names, key, rec); err != nil || len(r.Value) <= s.cfg.budget.maxBytes {
		return r, err
	}
	s.cfg.log.Warn("decision record over --decision-record-max-bytes; answering 413", "request_id", rec.GetRequestId(),
		"bytes", whole, "max_bytes", s.cfg.budget.maxBytes)
	return nil, tooLarge(reasonRecordTooLarge, "", fmt.Sprintf(
		"this decision's record takes %d bytes even with its hash chains left out, over the router's --decision-record-max-bytes %d; the same request will not fit on a retry (shorten lora_name or request_id, or raise the limit)",
		len(r.Value), s.cfg.budget.maxBytes))
}

// newDecisionRecord frames rec, stamped with its decided_at rather than the
// time of framing: a replica that knows a decision only by its decode
// worker and decided_at (a peer's load delta carries no position) finds its
// record by the time, on the partition the key picks
// (LogDecisionReader.FindDecision). The stamp passes events.CheckEventTime
// on every reader: the event time is the log time.
func newDecisionRecord(names events.Names, key []byte, rec *pb.DecisionRecord) (*kgo.Record, error) {
	r, err := events.NewRecord(names, key, rec)
	if err != nil {
		return nil, err
	}
	r.Timestamp = time.Unix(0, rec.GetDecidedAtUnixNano())
	return r, nil
}
