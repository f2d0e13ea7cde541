package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/logread"
	"github.com/pdrouter/pdrouter/internal/ulid"
)

// HeaderDecisionSource says where the record of GET /v1/decisions/{id} (and
// of its explain) came from: "index", the replica's state, or "log", a
// search of the decisions topic for a decision the state does not hold.
const HeaderDecisionSource = "X-Pdrouter-Decision-Source"

// The values of HeaderDecisionSource.
const (
	sourceIndex = "index"
	sourceLog   = "log"
)

// DecisionSearch bounds the searches of the decisions topic for decisions
// the replica's state does not hold: any well-formed id a client sends
// buys one, so each is bounded, and so is their number. A zero field takes
// its default.
type DecisionSearch struct {
	// Concurrent is how many searches run at once; one more is answered
	// 503 decision_search_busy at once, with Retry-After (default
	// DefaultDecisionSearches).
	Concurrent int
	// Timeout bounds a whole search, every partition together (default
	// DefaultDecisionSearchTimeout).
	Timeout time.Duration
	// PartitionRecords and PartitionBytes bound the search of each
	// partition, as logread.ScanLimits' Records and Bytes (defaults
	// DefaultDecisionSearchPartitionRecords and
	// DefaultDecisionSearchPartitionBytes).
	PartitionRecords int
	PartitionBytes   int64
}

// The defaults of DecisionSearch. A search reads, on each partition of the
// decisions topic, the records stamped from a second before the id's time
// to events.MaxEventSkew after it: at 80 decisions a second on a partition,
// ~5,000 records. The partition that holds the decision ends its scan at
// the record; the others read their whole window, so a search of 16
// partitions may fetch up to 16 × 8 MiB, and four of them at once bound
// what hostile ids can make a replica read.
const (
	DefaultDecisionSearches               = 4
	DefaultDecisionSearchTimeout          = 10 * time.Second
	DefaultDecisionSearchPartitionRecords = logread.DefaultScanRecords
	DefaultDecisionSearchPartitionBytes   = 8 << 20
)

func (d DecisionSearch) withDefaults() (DecisionSearch, error) {
	if d.Concurrent < 0 || d.Timeout < 0 || d.PartitionRecords < 0 || d.PartitionBytes < 0 {
		return d, fmt.Errorf("api: negative decision search bounds %+v", d)
	}
	d.Concurrent = cmp.Or(d.Concurrent, DefaultDecisionSearches)
	d.Timeout = cmp.Or(d.Timeout, DefaultDecisionSearchTimeout)
	d.PartitionRecords = cmp.Or(d.PartitionRecords, DefaultDecisionSearchPartitionRecords)
	d.PartitionBytes = cmp.Or(d.PartitionBytes, DefaultDecisionSearchPartitionBytes)
	return d, nil
}

// The result label of pdrouter_decision_log_searches_total.
const (
	searchFound    = "found"     // the record, on the log
	searchNotFound = "not_found" // searched; no partition holds it (or holds its time any more)
	searchLimited  = "limited"   // a partition's bounds, or the deadline, came first
	searchBusy     = "busy"      // DecisionSearch.Concurrent searches were running
	searchRefused  = "refused"   // answered without a scan: a malformed, future or too old id, or no reader
	searchError    = "error"     // the cluster failed the search
)

var searchResults = []string{searchFound, searchNotFound, searchLimited, searchBusy, searchRefused, searchError}

// decisionByID returns the whole record of decision id and where it came
// from: the state, or, for a decision the state does not hold (past
// --decision-retention, or never applied), a search of the decisions
// topic, which keeps records longer.
func (s *Server) decisionByID(ctx context.Context, id string) (*pb.DecisionRecord, string, error) {
	if sd, ok := s.deps.State.Decision(id); ok {
		rec, err := s.wholeDecision(ctx, sd)
		return rec, sourceIndex, err
	}
	rec, err := s.searchDecision(ctx, id)
	return rec, sourceLog, err
}

// searchDecision finds decision id, which the state does not hold, on the
// decisions topic. The id's ULID time is its decided_at to the millisecond
// (commitDecision stamps both from one clock reading) and the record's
// Kafka timestamp (newDecisionRecord), so each partition is searched from
// there. Whatever a search would not find is answered before it starts: an
// id the API cannot have made (400), one stamped in the future, or before
// the topic's retention (404).
func (s *Server) searchDecision(ctx context.Context, id string) (*pb.DecisionRecord, error) {
	at, err := ulid.Time(id)
	if err != nil {
		s.metrics.logSearches.WithLabelValues(searchRefused).Inc()
		return nil, badRequest("invalid_decision_id", "decision_id",
			fmt.Sprintf("decision id %s is not one this API makes (a 26-character ULID): %v", quoted(id), err))
	}
	stamp := at.UTC().Format(time.RFC3339Nano)
	now := s.cfg.now()
	if at.After(now.Add(events.MaxEventSkew)) {
		s.metrics.logSearches.WithLabelValues(searchRefused).Inc()
		return nil, notFound("unknown_decision", fmt.Sprintf("no decision %s: its id is stamped %s, more than %s after this replica's clock, so no decision has it; the decisions topic was not searched",
			id, stamp, events.MaxEventSkew))
	}
	if s.deps.Records == nil {
		s.metrics.logSearches.WithLabelValues(searchRefused).Inc()
		return nil, notFound("unknown_decision", "no decision "+id+" in this replica's state, and it has no reader of the decisions topic to search (pdrouter explain <decision-id> reads the log)")
	}
	select {
	case s.searchSlots <- struct{}{}:
		defer func() { <-s.searchSlots }()
	default:
		s.metrics.logSearches.WithLabelValues(searchBusy).Inc()
		return nil, unavailable("decision_search_busy", fmt.Sprintf("decision %s is not in this replica's state, and %d searches of the decisions topic are running, the most it runs at once; retry", id, s.cfg.search.Concurrent), 1)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.search.Timeout)
	defer cancel()
	keep, err := s.deps.Records.Retention(ctx)
	if err != nil {
		// A topic whose retention cannot be read is searched all the
		// same: the scan of a time it no longer holds stops at its first
		// record.
		s.cfg.log.Debug("reading the decisions topic's retention", "err", err)
	}
	if keep > 0 && at.Before(now.Add(-keep)) {
		s.metrics.logSearches.WithLabelValues(searchRefused).Inc()
		return nil, notFound("unknown_decision", fmt.Sprintf("no decision %s in this replica's state; its id is stamped %s, older than the decisions topic keeps records (retention.ms %s), so the topic was not searched",
			id, stamp, keep))
	}
	lim := s.cfg.search
	start := time.Now()
	rec, scanned, err := s.deps.Records.SearchDecision(ctx, id, at, logread.ScanLimits{After: events.MaxEventSkew, Records: lim.PartitionRecords, Bytes: lim.PartitionBytes})
	result, err := s.searchAnswer(id, stamp, err)
	s.metrics.logSearches.WithLabelValues(result).Inc()
	s.metrics.logSearchRecords.Observe(float64(scanned))
	s.cfg.log.Debug("searched the decisions topic for a decision", "decision_id", id, "at", stamp, "result", result,
		"records", scanned, "duration", time.Since(start), "err", err)
	return rec, err
}

// searchAnswer maps the error of a search for decision id, stamped stamp,
// to its result label and the API's answer.
func (s *Server) searchAnswer(id, stamp string, err error) (string, error) {
	lim := s.cfg.search
	switch {
	case err == nil:
		return searchFound, nil
	case errors.Is(err, ErrRecordNotFound):
		return searchNotFound, notFound("unknown_decision", fmt.Sprintf("no decision %s in this replica's state, nor on the decisions topic: every partition was searched around %s, the time in its id",
			id, stamp))
	case errors.Is(err, ErrRecordGone):
		return searchNotFound, notFound("unknown_decision", fmt.Sprintf("no decision %s in this replica's state; the decisions topic was searched around %s, the time in its id, and no longer holds every record of that time (retention)",
			id, stamp))
	case errors.Is(err, ErrSearchLimit):
		return searchLimited, unavailable("decision_search_limited", fmt.Sprintf("decision %s is not in this replica's state, and the search of the decisions topic around %s reached its bounds (%d records or %d bytes a partition, %s in all) before it found it; pdrouter explain <decision-id> reads the log without them",
			id, stamp, lim.PartitionRecords, lim.PartitionBytes, lim.Timeout), 1)
	}
	// The cause (broker addresses and all) goes to the log, not to the
	// caller.
	s.cfg.log.Warn("searching the decisions topic for a decision", "decision_id", id, "at", stamp, "err", err)
	return searchError, unavailable("decision_log_unavailable", fmt.Sprintf("decision %s is not in this replica's state, and the decisions topic could not be searched for it; retry, or see the router's log", id), 1)
}
