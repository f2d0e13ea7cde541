package events

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Load shares (docs/scaling.md, "Load shares"): the record of the topic
// load-shares, a writer's absolute shares of the workers' load, one record
// per group commit, written and read by replicas of serve --load-deltas
// snapshots. This file holds the record's bounds, its validation and its
// codec.
//
// As for load deltas, every rule is a function of the record, its key and
// its Kafka timestamp alone, so every replica refuses the same records, and
// a record is refused whole: a peer keeps per (writer, worker) the share of
// the highest seq, and applying part of a snapshot would leave rows of a
// seq whose other rows were never applied.

// Bounds of a LoadShares. A record holds the workers whose share changed in
// one group commit, a few in practice, or a writer's whole fleet when it
// repeats itself; the bounds are far above either and keep the worst case a
// replica decodes and holds small.
const (
	// MaxSharesBytes bounds a LoadShares value, checked before it is
	// parsed, so that nothing it declares is allocated beyond it.
	MaxSharesBytes = 1 << 20
	// MaxShareWorkers bounds the shares of a record, counted before they
	// are allocated: ten times the ~2,000 worker ranks of a 1,000-GPU fleet
	// (docs/scaling.md). A value of MaxSharesBytes could otherwise declare
	// half a million empty shares; at the bound a decoded record holds
	// about 3 MiB.
	MaxShareWorkers = 20_000
	// MaxShareCount bounds decode_blocks, prefill_tokens and
	// recent_local_tokens: 2^40 blocks or tokens, far past any worker's
	// memory. A peer adds one row per writer to its own share in int64
	// (decider.ActiveLoad); rows of this bound stay below 2^62 for up to
	// 2^22 writers, so no sum overflows and every value converts to int64
	// as it is.
	MaxShareCount = 1 << 40
	// MaxShareSamples bounds the latency samples of a record, counted
	// before they are allocated. A writer sends at most MaxSamplesSent a
	// snapshot; the rest wait for the next.
	MaxShareSamples = 1024
	// MaxSamplesSent is what a writer puts in one snapshot: the requests
	// that ended in one group commit, a handful, or a backlog after a
	// snapshot the log refused.
	MaxSamplesSent = 256
)

// Reasons a LoadShares is refused: the fixed "reason" labels of
// pdrouter_records_invalid_total{topic="load-shares"} once the topic is
// read.
const (
	ReasonSharesTooLarge        = "shares_too_large"
	ReasonSharesMalformed       = "shares_malformed"
	ReasonSharesEmpty           = "shares_empty"
	ReasonSharesTooManyWorkers  = "shares_too_many_workers"
	ReasonSharesBadWriter       = "shares_bad_writer"
	ReasonSharesKeyMismatch     = "shares_key_mismatch"
	ReasonSharesBadSeq          = "shares_bad_seq"
	ReasonSharesClock           = "shares_clock"
	ReasonSharesBadWorker       = "shares_bad_worker"
	ReasonSharesDuplicateWorker = "shares_duplicate_worker"
	ReasonSharesBadCount        = "shares_bad_count"
	ReasonSharesTooManySamples  = "shares_too_many_samples"
	ReasonSharesBadSample       = "shares_bad_sample"
)

// LoadSharesReasons lists every reason, for metrics whose series exist
// from the start.
var LoadSharesReasons = []string{
	ReasonSharesTooLarge, ReasonSharesMalformed, ReasonSharesEmpty, ReasonSharesTooManyWorkers,
	ReasonSharesBadWriter, ReasonSharesKeyMismatch, ReasonSharesBadSeq, ReasonSharesClock,
	ReasonSharesBadWorker, ReasonSharesDuplicateWorker, ReasonSharesBadCount,
	ReasonSharesTooManySamples, ReasonSharesBadSample,
}

// errTooManySamples is unmarshalLoadShares' refusal of a value with more
// than MaxShareSamples samples, built once.
var errTooManySamples = &ValidationError{Reason: ReasonSharesTooManySamples, Field: "samples",
	Err: fmt.Errorf("load shares: more than %d latency samples", MaxShareSamples)}

// sharesBounds are MaxSharesBytes and MaxShareWorkers for decodeBounded.
var sharesBounds = recordBounds{
	what: "load shares", maxBytes: MaxSharesBytes, tooLarge: ReasonSharesTooLarge, malformed: ReasonSharesMalformed,
	maxEntries: MaxShareWorkers, entries: "shares", tooMany: ReasonSharesTooManyWorkers, errEntries: errShareWorkers,
	errTooMany: fmt.Errorf("load shares: more than %d shares", MaxShareWorkers),
}

// DecodeLoadShares parses and validates a LoadShares value read with key
// at logTime (the record's Kafka timestamp; zero checks the content only).
// Any error is a *ValidationError whose Reason is one of
// LoadSharesReasons. It parses with unmarshalLoadShares
// (loadshareswire.go), which accepts what proto.Unmarshal accepts and
// drops unknown fields.
func DecodeLoadShares(key, value []byte, logTime time.Time) (*pb.LoadShares, error) {
	return decodeBounded(value, &sharesBounds, unmarshalLoadShares, func(s *pb.LoadShares) error {
		return ValidateLoadShares(s, string(key), logTime)
	})
}

// MarshalLoadShares validates s as a record keyed by key and encodes it
// with deterministic field order, refusing a value past MaxSharesBytes: a
// writer never produces a record a reader refuses.
func MarshalLoadShares(s *pb.LoadShares, key string) ([]byte, error) {
	if err := ValidateLoadShares(s, key, time.Time{}); err != nil {
		return nil, err
	}
	return marshalBounded(s, &sharesBounds)
}

// ValidateLoadShares checks the rules of a LoadShares keyed by key, read
// or written at logTime (zero: content only).
func ValidateLoadShares(s *pb.LoadShares, key string, logTime time.Time) error {
	switch w := s.GetWriterId(); {
	case w == "":
		return invalid(ReasonSharesBadWriter, "writer_id", "load shares: writer_id is required")
	case len(w) > MaxNameLen:
		return invalid(ReasonSharesBadWriter, "writer_id", "load shares: writer_id is %d bytes, at most %d are allowed", len(w), MaxNameLen)
	case w != key:
		// The key places a writer's snapshots in one partition, in seq order.
		return invalid(ReasonSharesKeyMismatch, "writer_id", "load shares: writer %q in a record keyed %q", w, key)
	}
	if s.GetSeq() == 0 {
		return invalid(ReasonSharesBadSeq, "seq", "load shares: seq is 0, the first snapshot is 1")
	}
	clock := s.GetClockUnixNano()
	if err := checkEventTime(clock, logTime); err != nil {
		return invalid(ReasonSharesClock, "clock_unix_nano", "load shares: clock: %v", err)
	}
	n := len(s.GetShares())
	if n == 0 && len(s.GetSamples()) == 0 {
		return invalid(ReasonSharesEmpty, "shares", "load shares: no shares and no samples")
	}
	if len(s.GetSamples()) > MaxShareSamples {
		return errTooManySamples
	}
	if err := validateSamples(s.GetSamples(), logTime); err != nil {
		return err
	}
	if n > MaxShareWorkers {
		return invalid(ReasonSharesTooManyWorkers, "shares", "load shares: %d shares, at most %d are allowed", n, MaxShareWorkers)
	}
	// A worker twice would make its row depend on which entry a peer
	// applied last. A writer sends its shares in worker order (TakeShares),
	// where a worker twice would sit side by side: an ordered record is
	// checked against its neighbours alone, any other against a map.
	ordered := true
	for i, e := range s.GetShares() {
		w := e.GetWorker()
		if err := validateRef(w, "worker"); err != nil {
			return invalid(ReasonSharesBadWorker, "worker", "load shares: share %d: %v", i, err)
		}
		if i > 0 && ordered {
			ordered = compareWorkers(s.Shares[i-1].GetWorker(), w) < 0
		}
		if err := validateShare(i, e); err != nil {
			return err
		}
	}
	if ordered {
		return nil
	}
	seen := make(map[workerKey]int, n)
	for i, e := range s.GetShares() {
		k := workerKey{e.GetWorker().GetWorkerId(), e.GetWorker().GetDpRank()}
		if j, dup := seen[k]; dup {
			return invalid(ReasonSharesDuplicateWorker, "worker", "load shares: shares %d and %d are both for worker %q rank %d", j, i, k.id, k.rank)
		}
		seen[k] = i
	}
	return nil
}

// compareWorkers orders worker refs by id, then rank: the order in which a
// writer sends its shares.
func compareWorkers(a, b *pb.WorkerRef) int {
	if c := strings.Compare(a.GetWorkerId(), b.GetWorkerId()); c != 0 {
		return c
	}
	return cmp.Compare(a.GetDpRank(), b.GetDpRank())
}

type workerKey struct {
	id   string
	rank uint32
}

// validateShare checks share i's counts: their bound, and each against
// what it belongs to.
func validateShare(i int, e *pb.WorkerShare) error {
	for _, f := range []struct {
		name string
		v    uint64
	}{{"decode_blocks", e.GetDecodeBlocks()}, {"prefill_tokens", e.GetPrefillTokens()}, {"recent_local_tokens", e.GetRecentLocalTokens()}} {
		if f.v > MaxShareCount {
			return invalid(ReasonSharesBadCount, f.name, "load shares: share %d: %s is %d, at most %d", i, f.name, f.v, uint64(MaxShareCount))
		}
	}
	// Blocks belong to the requests decoding on the worker, and a local
	// prefill's tokens to a decision of the window.
	if e.GetDecodeBlocks() > 0 && e.GetRequests() == 0 {
		return invalid(ReasonSharesBadCount, "decode_blocks", "load shares: share %d: %d decode blocks without requests", i, e.GetDecodeBlocks())
	}
	if e.GetRecentLocalTokens() > 0 && e.GetRecentDecisions() == 0 {
		return invalid(ReasonSharesBadCount, "recent_local_tokens", "load shares: share %d: %d recent local tokens without decisions", i, e.GetRecentLocalTokens())
	}
	return nil
}

// validateSamples checks the latency samples: each a decision id, a path
// and its nine features within the model's bounds, at least one target,
// event times as any record's, and no decision id twice (a peer would
// learn the later one's facts over the earlier's).
func validateSamples(ss []*pb.LatencySample, logTime time.Time) error {
	bad := func(i int, field, format string, args ...any) error {
		return invalid(ReasonSharesBadSample, field, "load shares: sample %d: %s", i, fmt.Sprintf(format, args...))
	}
	var seen map[string]int
	if len(ss) > 1 {
		seen = make(map[string]int, len(ss))
	}
	for i, e := range ss {
		switch id := e.GetDecisionId(); {
		case id == "":
			return bad(i, "decision_id", "decision_id is required")
		case len(id) > MaxIDLen:
			return bad(i, "decision_id", "decision_id is %d bytes, at most %d are allowed", len(id), MaxIDLen)
		}
		if j, dup := seen[e.GetDecisionId()]; dup {
			return bad(i, "decision_id", "decision %q is also sample %d", e.GetDecisionId(), j)
		}
		if seen != nil {
			seen[e.GetDecisionId()] = i
		}
		if e.GetLatencyPath() >= loadDeltaLatencyPaths {
			return bad(i, "latency_path", "latency_path %d, want below %d", e.GetLatencyPath(), loadDeltaLatencyPaths)
		}
		if len(e.GetLatencyInputs()) != LoadDeltaLatencyInputs {
			return bad(i, "latency_inputs", "%d latency inputs, want %d", len(e.GetLatencyInputs()), LoadDeltaLatencyInputs)
		}
		for k, x := range e.GetLatencyInputs() {
			if x > maxLatencyInput {
				return bad(i, "latency_inputs", "latency input %d is %d, at most %d", k, x, maxLatencyInput)
			}
		}
		if e.TtftUnits == nil && e.ItlUnits == nil {
			return bad(i, "ttft_units", "neither ttft_units nor itl_units")
		}
		times := []struct {
			name string
			t    int64
			set  bool
		}{{"decided_at_unix_nano", e.GetDecidedAtUnixNano(), true}, {"ttft_at_unix_nano", e.GetTtftAtUnixNano(), e.TtftUnits != nil},
			{"itl_at_unix_nano", e.GetItlAtUnixNano(), e.ItlUnits != nil}}
		for _, f := range times {
			if !f.set {
				continue
			}
			if err := checkEventTime(f.t, logTime); err != nil {
				return bad(i, f.name, "%v", err)
			}
		}
		for _, f := range []struct {
			name string
			v    *uint32
		}{{"ttft_units", e.TtftUnits}, {"itl_units", e.ItlUnits}} {
			if f.v != nil && *f.v > maxLatencyInput {
				return bad(i, f.name, "%s is %d, at most %d", f.name, *f.v, maxLatencyInput)
			}
		}
	}
	return nil
}
