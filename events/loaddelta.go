package events

import (
	"fmt"
	"math"
	"time"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Load deltas (docs/scaling.md, "Load deltas"; design.md, invariants D1-D5):
// the compact record peers apply instead of whole DecisionRecords and
// OutcomeEvents (topic load-deltas). This file holds the record's bounds,
// its validation and its codec; statestore/loaddelta.go applies it.
//
// Every rule below is a function of the record, its key and its Kafka
// timestamp alone, so every replica refuses the same records, and a record
// is refused whole: a record is one replica's group commit, and applying
// part of it would make the state depend on which entries were good.

// Bounds of a LoadDelta. A record holds one group commit's entries for one
// decode worker, a few in practice; the bounds are far above that and keep
// the worst case a replica decodes and holds small.
const (
	// MaxDeltaBytes bounds a LoadDelta value, checked before it is parsed,
	// so that nothing it declares is allocated beyond it.
	MaxDeltaBytes = 1 << 20
	// MaxDeltaEntries bounds the decisions and lifecycle events of a record
	// together.
	MaxDeltaEntries = 1024
	// MaxDeltaHashes bounds a decision's chain (shared and own hashes):
	// 4,096 tokens at 16-token blocks. Active-prefix matching reads a
	// prompt's leading blocks; the blocks past the chain count as blocks
	// without a hash, so active blocks stay exact.
	MaxDeltaHashes = 256
	// LoadDeltaLatencyInputs is how many latency inputs a decision carries
	// when it carries any: decider.LatencyInputs without the constant term
	// of its Vector (a test holds them equal).
	LoadDeltaLatencyInputs = 9
	// loadDeltaLatencyPaths is decider.NumPaths; maxLatencyInput is
	// decider.MaxLatencyFeature (a test holds them equal: events does not
	// import the decider).
	loadDeltaLatencyPaths = 2
	maxLatencyInput       = 1 << 20
)

// Reasons a LoadDelta is refused: the fixed "reason" labels of
// pdrouter_records_invalid_total{topic="load-deltas"}.
const (
	ReasonDeltaTooLarge       = "delta_too_large"
	ReasonDeltaMalformed      = "delta_malformed"
	ReasonDeltaEmpty          = "delta_empty"
	ReasonDeltaTooManyEntries = "delta_too_many_entries"
	ReasonDeltaTooManyHashes  = "delta_too_many_hashes"
	ReasonDeltaBadShare       = "delta_bad_share"
	ReasonDeltaKeyMismatch    = "delta_key_mismatch"
	ReasonDeltaBadWorker      = "delta_bad_worker"
	ReasonDeltaBadID          = "delta_bad_id"
	ReasonDeltaBadTokens      = "delta_bad_tokens"
	ReasonDeltaBadLatency     = "delta_bad_latency"
	ReasonDeltaBadKind        = "delta_bad_kind"
	ReasonDeltaEventTime      = "delta_event_time"
)

// LoadDeltaReasons lists every reason, for metrics whose series exist from
// the start.
var LoadDeltaReasons = []string{
	ReasonDeltaTooLarge, ReasonDeltaMalformed, ReasonDeltaEmpty, ReasonDeltaTooManyEntries,
	ReasonDeltaTooManyHashes, ReasonDeltaBadShare, ReasonDeltaKeyMismatch, ReasonDeltaBadWorker,
	ReasonDeltaBadID, ReasonDeltaBadTokens, ReasonDeltaBadLatency, ReasonDeltaBadKind, ReasonDeltaEventTime,
}

// deltaBounds are MaxDeltaBytes and MaxDeltaEntries for decodeBounded.
// Entries are refused before they are allocated: a value of MaxDeltaBytes
// holds up to half a million empty ones.
var deltaBounds = recordBounds{
	what: "load delta", maxBytes: MaxDeltaBytes, tooLarge: ReasonDeltaTooLarge, malformed: ReasonDeltaMalformed,
	maxEntries: MaxDeltaEntries, entries: "entries", tooMany: ReasonDeltaTooManyEntries, errEntries: errDeltaEntries,
	errTooMany: fmt.Errorf("load delta: more than %d entries", MaxDeltaEntries),
}

// DecodeLoadDelta parses and validates a LoadDelta value read with key at
// logTime (the record's Kafka timestamp; zero checks the content only). Any
// error is a *ValidationError whose Reason is one of LoadDeltaReasons. It
// parses with unmarshalLoadDelta (loaddeltawire.go), which accepts what
// proto.Unmarshal accepts and drops unknown fields.
func DecodeLoadDelta(key, value []byte, logTime time.Time) (*pb.LoadDelta, error) {
	return decodeBounded(value, &deltaBounds, unmarshalLoadDelta, func(d *pb.LoadDelta) error {
		return ValidateLoadDelta(d, string(key), logTime)
	})
}

// MarshalLoadDelta validates d as a record keyed by key and encodes it
// with deterministic field order, refusing a value past MaxDeltaBytes: a
// writer never produces a record a reader refuses.
func MarshalLoadDelta(d *pb.LoadDelta, key string) ([]byte, error) {
	if err := ValidateLoadDelta(d, key, time.Time{}); err != nil {
		return nil, err
	}
	return marshalBounded(d, &deltaBounds)
}

// ValidateLoadDelta checks the rules of a LoadDelta keyed by key, read or
// written at logTime (zero: content only).
func ValidateLoadDelta(d *pb.LoadDelta, key string, logTime time.Time) error {
	if err := maxLen(d.GetWriterId(), "writer_id", MaxNameLen); err != nil {
		return invalid(ReasonDeltaBadID, "writer_id", "load delta: %v", err)
	}
	n := len(d.GetDecisions()) + len(d.GetLifecycle())
	if n == 0 {
		return invalid(ReasonDeltaEmpty, "", "load delta: no entries")
	}
	if n > MaxDeltaEntries {
		return invalid(ReasonDeltaTooManyEntries, "", "load delta: %d entries, at most %d are allowed", n, MaxDeltaEntries)
	}
	if err := ValidateWorkerID(key); err != nil {
		return invalid(ReasonDeltaKeyMismatch, "key", "load delta: key: %v", err)
	}
	chainLen := make([]int, len(d.GetDecisions()))
	for i, e := range d.GetDecisions() {
		l, err := validateDecisionDelta(d, i, e, key, logTime, chainLen)
		if err != nil {
			return err
		}
		chainLen[i] = l
	}
	for i, e := range d.GetLifecycle() {
		if err := validateLifecycleDelta(i, e, key, logTime); err != nil {
			return err
		}
	}
	return nil
}

// validateDecisionDelta checks decision i and returns the length of its
// chain; chainLen holds those of the decisions before it.
func validateDecisionDelta(d *pb.LoadDelta, i int, e *pb.DecisionDelta, key string, logTime time.Time, chainLen []int) (int, error) {
	if err := deltaIDs(e.GetDecisionId(), e.GetRequestId(), true, "decisions", i); err != nil {
		return 0, err
	}
	if err := deltaWorker(e.GetDecodeWorker(), key, "decisions", i); err != nil {
		return 0, err
	}
	if err := deltaTime(e.GetDecidedAtUnixNano(), logTime, "decisions", i); err != nil {
		return 0, err
	}
	if pw := e.GetPrefillWorker(); pw != nil {
		if e.GetLocal() {
			return 0, invalid(ReasonDeltaBadWorker, "prefill_worker", "load delta: decision %d is local and names a prefill worker", i)
		}
		if err := validateRef(pw, "prefill_worker"); err != nil {
			return 0, invalid(ReasonDeltaBadWorker, "prefill_worker", "load delta: decision %d: %v", i, err)
		}
	}
	bs, p := e.GetBlockSize(), e.GetPromptTokens()
	switch {
	case bs == 0 || bs > MaxBlockSize:
		return 0, invalid(ReasonDeltaBadTokens, "block_size", "load delta: decision %d: block_size %d, want 1 to %d", i, bs, MaxBlockSize)
	case e.GetEffectiveIsl() > p:
		return 0, invalid(ReasonDeltaBadTokens, "effective_isl", "load delta: decision %d: effective_isl %d exceeds prompt_tokens %d", i, e.GetEffectiveIsl(), p)
	case e.GetPrefillCachedTokens() > p:
		return 0, invalid(ReasonDeltaBadTokens, "prefill_cached_tokens", "load delta: decision %d: prefill_cached_tokens %d exceeds prompt_tokens %d", i, e.GetPrefillCachedTokens(), p)
	case e.GetPrefillCachedTokens() > 0 && e.GetPrefillWorker() == nil:
		return 0, invalid(ReasonDeltaBadTokens, "prefill_cached_tokens", "load delta: decision %d: prefill_cached_tokens without a prefill worker", i)
	}
	l, err := deltaShare(d, i, e, chainLen)
	if err != nil {
		return 0, err
	}
	if l > MaxDeltaHashes {
		return 0, invalid(ReasonDeltaTooManyHashes, "active_hashes", "load delta: decision %d: a chain of %d hashes, at most %d are allowed", i, l, MaxDeltaHashes)
	}
	if uint64(l) > uint64(p/bs) {
		// Only complete blocks are hashed (design.md, Hashing).
		return 0, invalid(ReasonDeltaTooManyHashes, "active_hashes", "load delta: decision %d: %d hashes for %d complete blocks", i, l, p/bs)
	}
	if err := deltaLatency(e, i); err != nil {
		return 0, err
	}
	return l, nil
}

// deltaShare checks the shared prefix of decision i and returns its
// chain's length.
func deltaShare(d *pb.LoadDelta, i int, e *pb.DecisionDelta, chainLen []int) (int, error) {
	own, with, shared := len(e.GetActiveHashes()), e.GetSharesHashesWith(), e.GetSharedHashes()
	if with == 0 {
		if shared != 0 {
			return 0, invalid(ReasonDeltaBadShare, "shared_hashes", "load delta: decision %d: shared_hashes %d without shares_hashes_with", i, shared)
		}
		return own, nil
	}
	j := uint64(with) - 1
	switch {
	case j >= uint64(i):
		return 0, invalid(ReasonDeltaBadShare, "shares_hashes_with", "load delta: decision %d shares the hashes of decision %d, not an earlier one", i, j)
	case shared == 0 || uint64(shared) > uint64(chainLen[j]):
		return 0, invalid(ReasonDeltaBadShare, "shared_hashes", "load delta: decision %d shares %d hashes of decision %d, which has %d", i, shared, j, chainLen[j])
	case d.GetDecisions()[j].GetBlockSize() != e.GetBlockSize():
		return 0, invalid(ReasonDeltaBadShare, "shares_hashes_with", "load delta: decision %d shares the hashes of decision %d of another block size", i, j)
	}
	return int(shared) + own, nil
}

func deltaLatency(e *pb.DecisionDelta, i int) error {
	in := e.GetLatencyInputs()
	if len(in) == 0 {
		if e.GetLatencyPath() != 0 {
			return invalid(ReasonDeltaBadLatency, "latency_path", "load delta: decision %d: a latency path without inputs", i)
		}
		return nil // no latency sample (no candidate row of its worker)
	}
	if len(in) != LoadDeltaLatencyInputs {
		return invalid(ReasonDeltaBadLatency, "latency_inputs", "load delta: decision %d: %d latency inputs, want %d", i, len(in), LoadDeltaLatencyInputs)
	}
	if e.GetLatencyPath() >= loadDeltaLatencyPaths {
		return invalid(ReasonDeltaBadLatency, "latency_path", "load delta: decision %d: latency path %d, want below %d", i, e.GetLatencyPath(), loadDeltaLatencyPaths)
	}
	for k, v := range in {
		if v > maxLatencyInput {
			return invalid(ReasonDeltaBadLatency, "latency_inputs", "load delta: decision %d: latency input %d is %d, at most %d", i, k, v, maxLatencyInput)
		}
	}
	return nil
}

func validateLifecycleDelta(i int, e *pb.LifecycleDelta, key string, logTime time.Time) error {
	if err := deltaIDs(e.GetDecisionId(), e.GetRequestId(), false, "lifecycle", i); err != nil {
		return err
	}
	if err := deltaWorker(e.GetDecodeWorker(), key, "lifecycle", i); err != nil {
		return err
	}
	if err := deltaTime(e.GetEventTimeUnixNano(), logTime, "lifecycle", i); err != nil {
		return err
	}
	switch e.GetKind() {
	case pb.OutcomeEvent_KIND_PREFILL_DONE, pb.OutcomeEvent_KIND_COMPLETED, pb.OutcomeEvent_KIND_CANCELLED:
	default:
		return invalid(ReasonDeltaBadKind, "kind", "load delta: lifecycle %d: kind %v", i, e.GetKind())
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"ttft_ms", e.TtftMs}, {"itl_ms_mean", e.ItlMsMean}} {
		if f.v != nil && (math.IsNaN(*f.v) || math.IsInf(*f.v, 0) || *f.v < 0) {
			return invalid(ReasonDeltaBadLatency, f.name, "load delta: lifecycle %d: %s is %v, want a finite value ≥ 0", i, f.name, *f.v)
		}
	}
	return nil
}

// deltaIDs checks an entry's ids; a lifecycle entry may name no decision.
func deltaIDs(decisionID, requestID string, needDecision bool, kind string, i int) error {
	for _, f := range []struct {
		name, v  string
		required bool
	}{{"decision_id", decisionID, needDecision}, {"request_id", requestID, true}} {
		if f.v == "" && f.required {
			return invalid(ReasonDeltaBadID, f.name, "load delta: %s %d: %s is required", kind, i, f.name)
		}
		if len(f.v) > MaxIDLen {
			return invalid(ReasonDeltaBadID, f.name, "load delta: %s %d: %s is %d bytes, at most %d are allowed", kind, i, f.name, len(f.v), MaxIDLen)
		}
	}
	return nil
}

// deltaWorker checks that an entry's decode worker is valid and is the
// record's key: every entry lands in its own worker's partition (and cell).
func deltaWorker(w *pb.WorkerRef, key, kind string, i int) error {
	if err := validateRef(w, "decode_worker"); err != nil {
		return invalid(ReasonDeltaBadWorker, "decode_worker", "load delta: %s %d: %v", kind, i, err)
	}
	if w.GetWorkerId() != key {
		return invalid(ReasonDeltaKeyMismatch, "decode_worker", "load delta: %s %d is for worker %q in a record keyed %q", kind, i, w.GetWorkerId(), key)
	}
	return nil
}

func deltaTime(t int64, logTime time.Time, kind string, i int) error {
	if err := checkEventTime(t, logTime); err != nil {
		return invalid(ReasonDeltaEventTime, "event_time", "load delta: %s %d: %v", kind, i, err)
	}
	return nil
}

// LoadDeltaChains returns the chain of each decision of a valid d: its
// shared hashes, then its own. Chains that share no hashes are d's own
// slices; the others are new. At most MaxDeltaEntries × MaxDeltaHashes
// hashes in all (2 MiB), whatever the record shares.
func LoadDeltaChains(d *pb.LoadDelta) [][]uint64 {
	out := make([][]uint64, len(d.GetDecisions()))
	for i, e := range d.GetDecisions() {
		if e.GetSharesHashesWith() == 0 {
			out[i] = e.GetActiveHashes()
			continue
		}
		base := out[e.GetSharesHashesWith()-1][:e.GetSharedHashes()]
		c := make([]uint64, 0, len(base)+len(e.GetActiveHashes()))
		out[i] = append(append(c, base...), e.GetActiveHashes()...)
	}
	return out
}
