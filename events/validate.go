package events

import (
	"errors"
	"fmt"
	"time"
	"unicode"

	"google.golang.org/protobuf/proto"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// MaxWorkerIDLen bounds worker ids: they become record keys, metric label
// values and Pebble key components.
const MaxWorkerIDLen = 253

// MaxBlockSize bounds tokens per block; engines use 16 to 512.
const MaxBlockSize = 1 << 16

// MaxDPSize bounds a worker's data-parallel size, and so every dp_rank. Each
// rank is a separate KV cache the router tracks and a separate metric label
// value, so the declared size must not be able to ask every replica for
// billions of them. Attention-DP deployments run a few to a few hundred
// ranks per engine; 1024 leaves room while keeping a registration's worst
// case small.
const MaxDPSize = 1024

// Length bounds of the free-form strings of records. They end up in Pebble
// keys and values, API answers and logs on every replica; the bounds are far
// above any real value and far below anything that could hurt.
const (
	// MaxIDLen bounds decision and request ids (Pebble keys).
	MaxIDLen = 256
	// MaxNameLen bounds model, LoRA, replica and similar names.
	MaxNameLen = 512
	// MaxEndpointLen bounds ZMQ endpoints and metrics URLs.
	MaxEndpointLen = 2048
	// MaxTopicLen bounds a ZMQ subscription topic (kv_events_topic).
	MaxTopicLen = 256
)

// MaxEventSkew is how far a record's event time may be ahead of the Kafka
// timestamp of the record (the clock of the process that wrote it). Every
// clock of the state is the max event time applied, so one record dated in
// the future would freeze a worker's load view (later real samples look
// stale) or expire every active request; with this bound one record moves
// a clock at most this far ahead of its writer's clock. Engines and
// routers run NTP-synchronized clocks, well within a minute of each other.
const MaxEventSkew = time.Minute

// Reasons a record fails validation. Each is a fixed string, the bounded
// "reason" label of pdrouter_records_invalid_total for records skipped on
// apply; a *ValidationError carries one.
const (
	ReasonWorkerID     = "invalid_worker_id"
	ReasonDPSize       = "invalid_dp_size"
	ReasonDPRank       = "invalid_dp_rank"
	ReasonBlockSize    = "invalid_block_size"
	ReasonPool         = "invalid_pool"
	ReasonFieldTooLong = "field_too_long"
	ReasonKvEvent      = "invalid_kv_event"
	ReasonMissingID    = "missing_id"
	ReasonMode         = "invalid_mode"
	ReasonKind         = "invalid_kind"
	ReasonHealth       = "invalid_health"
	ReasonNegativeTime = "negative_timestamp"
	ReasonFutureTime   = "future_timestamp"
	ReasonNumber       = "invalid_number"
	reasonNoRule       = "no_rule"
)

// ValidationError is a record value that breaks an invariant. Reason is
// one of the Reason* constants, Field the record field at fault (for API
// answers).
type ValidationError struct {
	Reason string
	Field  string
	Err    error
}

func (e *ValidationError) Error() string { return e.Err.Error() }
func (e *ValidationError) Unwrap() error { return e.Err }

func invalid(reason, field, format string, args ...any) error {
	return &ValidationError{Reason: reason, Field: field, Err: fmt.Errorf(format, args...)}
}

// Validate checks the invariants a record value must hold before it may
// change state. Proto decoding accepts any well-formed bytes; this rejects
// values that would corrupt the prefix tables (a BlockStored whose token
// count does not match its blocks, an event for no worker, ...) or ask for
// unbounded resources (a dp_size of 2^32-1, a megabyte topic name, ...).
// Writers (NewRecord) and readers (Decode) share it through ValidateAt.
func Validate(m proto.Message) error {
	switch v := m.(type) {
	case *pb.KvEventRecord:
		if err := validateRef(v.GetWorker(), "worker"); err != nil {
			return err
		}
		return validateKv(v)
	case *pb.LoadSample:
		if err := validateRef(v.GetWorker(), "worker"); err != nil {
			return err
		}
		return maxLen(v.GetOrigin(), "origin", MaxNameLen)
	case *pb.WorkerRegistration:
		return validateRegistration(v)
	case *pb.DecisionRecord:
		return validateDecision(v)
	case *pb.OutcomeEvent:
		if v.GetRequestId() == "" {
			return invalid(ReasonMissingID, "request_id", "outcome: request_id is required")
		}
		if err := maxLen(v.GetRequestId(), "request_id", MaxIDLen); err != nil {
			return err
		}
		if err := maxLen(v.GetDecisionId(), "decision_id", MaxIDLen); err != nil {
			return err
		}
		if err := maxLen(v.GetErrorCode(), "error_code", MaxNameLen); err != nil {
			return err
		}
		if v.GetKind() == pb.OutcomeEvent_KIND_UNSPECIFIED {
			return invalid(ReasonKind, "kind", "outcome for %s: kind is unspecified", v.GetRequestId())
		}
		return nil
	case *pb.WorkerHealth:
		return validateHealth(v)
	case *pb.ForwardedEvent:
		return validateForward(v)
	}
	return invalid(reasonNoRule, "", "events: no validation rule for %T", m)
}

// ValidateAt is Validate for a record written or read at logTime, the
// record's Kafka timestamp: the event time must also be non-negative and
// not more than MaxEventSkew ahead of logTime. A zero logTime (a record
// built in memory, never produced) checks the content only.
func ValidateAt(m proto.Message, logTime time.Time) error {
	if err := Validate(m); err != nil {
		return err
	}
	return checkEventTime(EventTime(m), logTime)
}

// CheckEventTime applies ValidateAt's time rule to an event time in Unix
// nanoseconds, for writers that take a time from a client before building
// the record (the API's ts field).
func CheckEventTime(eventNs int64, logTime time.Time) error {
	return checkEventTime(eventNs, logTime)
}

func checkEventTime(t int64, logTime time.Time) error {
	if t < 0 {
		return invalid(ReasonNegativeTime, "event_time", "event time %d is negative", t)
	}
	if logTime.IsZero() {
		return nil
	}
	limit := logTime.UnixNano()
	if limit > (1<<63-1)-int64(MaxEventSkew) {
		return nil // a log time at the end of int64 bounds nothing further
	}
	if limit += int64(MaxEventSkew); t > limit {
		return invalid(ReasonFutureTime, "event_time", "event time %s is %s after the record's log time %s (at most %s allowed)",
			time.Unix(0, t).UTC().Format(time.RFC3339Nano), time.Duration(t-limit+int64(MaxEventSkew)),
			logTime.UTC().Format(time.RFC3339Nano), MaxEventSkew)
	}
	return nil
}

// EventTime returns the event time (Unix ns) a record value carries: the
// time that advances the state's clocks when it is applied.
func EventTime(m proto.Message) int64 {
	switch v := m.(type) {
	case *pb.KvEventRecord:
		return v.GetEventTimeUnixNano()
	case *pb.LoadSample:
		return v.GetSampleTimeUnixNano()
	case *pb.WorkerRegistration:
		return v.GetRegisteredAtUnixNano()
	case *pb.DecisionRecord:
		return v.GetDecidedAtUnixNano()
	case *pb.OutcomeEvent:
		return v.GetEventTimeUnixNano()
	case *pb.WorkerHealth:
		return v.GetObservedAtUnixNano()
	case *pb.ForwardedEvent:
		return v.GetEventTimeUnixNano()
	}
	return 0
}

// ValidationReason returns the Reason* of err when it is (or wraps) a
// *ValidationError, else "".
func ValidationReason(err error) string {
	var ve *ValidationError
	if errors.As(err, &ve) {
		return ve.Reason
	}
	return ""
}

// ValidateWorkerID rejects empty, overlong or non-printable worker ids,
// ids with '/', which WorkerRank reserves, and "." and "..", which would
// name a directory wherever an id becomes a path component.
func ValidateWorkerID(id string) error {
	if id == "" {
		return invalid(ReasonWorkerID, "worker_id", "worker_id is required")
	}
	if len(id) > MaxWorkerIDLen {
		return invalid(ReasonWorkerID, "worker_id", "worker_id is %d bytes: at most %d are allowed", len(id), MaxWorkerIDLen)
	}
	if id == "." || id == ".." {
		return invalid(ReasonWorkerID, "worker_id", "worker_id %q is reserved", id)
	}
	if printableASCII(id) {
		return nil
	}
	for i, r := range id {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return invalid(ReasonWorkerID, "worker_id", "worker_id %q has a non-printable or space character at byte %d", id, i)
		}
		if r == '/' {
			// "/" separates a worker from its data-parallel rank (WorkerRank).
			return invalid(ReasonWorkerID, "worker_id", "worker_id %q has '/' at byte %d: it is reserved for the dp rank suffix", id, i)
		}
	}
	return nil
}

// printableASCII reports whether id is printable ASCII without a space or
// '/': the ids of every fleet seen, checked a byte at a time. Any other id
// takes the rune loop of ValidateWorkerID, which accepts the same ASCII ids
// and finds the byte of a refused one.
func printableASCII(id string) bool {
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f || c == '/' {
			return false
		}
	}
	return true
}

// ValidateDPRank rejects a rank no worker can have (rank ≥ MaxDPSize).
// Whether the rank exists is a question for the registry: see the
// statestore's apply rules.
func ValidateDPRank(rank uint32) error {
	if rank >= MaxDPSize {
		return invalid(ReasonDPRank, "dp_rank", "dp_rank %d out of range [0, %d)", rank, MaxDPSize)
	}
	return nil
}

func validateRef(w *pb.WorkerRef, field string) error {
	if err := ValidateWorkerID(w.GetWorkerId()); err != nil {
		return err
	}
	if err := ValidateDPRank(w.GetDpRank()); err != nil {
		err.(*ValidationError).Field = field + ".dp_rank"
		return err
	}
	return nil
}

func maxLen(s, field string, n int) error {
	if len(s) > n {
		return invalid(ReasonFieldTooLong, field, "%s is %d bytes: at most %d are allowed", field, len(s), n)
	}
	return nil
}

func validateRegistration(v *pb.WorkerRegistration) error {
	id := v.GetWorkerId()
	if err := ValidateWorkerID(id); err != nil {
		return err
	}
	if v.GetPool() != pb.Pool_POOL_PREFILL && v.GetPool() != pb.Pool_POOL_DECODE {
		return invalid(ReasonPool, "pool", "worker %q: pool must be prefill or decode, got %v", id, v.GetPool())
	}
	if v.GetBlockSize() == 0 || v.GetBlockSize() > MaxBlockSize {
		return invalid(ReasonBlockSize, "block_size", "worker %q: block_size %d out of range [1, %d]", id, v.GetBlockSize(), MaxBlockSize)
	}
	if v.GetDpSize() > MaxDPSize {
		return invalid(ReasonDPSize, "dp_size", "worker %q: dp_size %d out of range [0, %d]", id, v.GetDpSize(), MaxDPSize)
	}
	for _, f := range []struct {
		name string
		v    string
		max  int
	}{
		{"model", v.GetModel(), MaxNameLen},
		{"kv_events_endpoint", v.GetKvEventsEndpoint(), MaxEndpointLen},
		{"kv_replay_endpoint", v.GetKvReplayEndpoint(), MaxEndpointLen},
		{"kv_events_topic", v.GetKvEventsTopic(), MaxTopicLen},
		{"metrics_url", v.GetMetricsUrl(), MaxEndpointLen},
		{"http_url", v.GetHttpUrl(), MaxEndpointLen},
	} {
		if err := maxLen(f.v, f.name, f.max); err != nil {
			return err
		}
	}
	return nil
}

func validateDecision(v *pb.DecisionRecord) error {
	if v.GetDecisionId() == "" || v.GetRequestId() == "" {
		return invalid(ReasonMissingID, "decision_id", "decision_id and request_id are required")
	}
	for _, f := range []struct {
		name string
		v    string
		max  int
	}{
		{"decision_id", v.GetDecisionId(), MaxIDLen},
		{"request_id", v.GetRequestId(), MaxIDLen},
		{"replica_id", v.GetReplicaId(), MaxNameLen},
		{"retry_of_decision_id", v.GetRetryOfDecisionId(), MaxIDLen},
	} {
		if err := maxLen(f.v, f.name, f.max); err != nil {
			return err
		}
	}
	if v.GetMode() != "local" && v.GetMode() != "remote" {
		return invalid(ReasonMode, "mode", "decision %s: mode %q is neither local nor remote", v.GetDecisionId(), v.GetMode())
	}
	if err := validateRef(v.GetDecodeWorker(), "decode_worker"); err != nil {
		return err
	}
	if pw := v.GetPrefillWorker(); pw != nil && pw.GetWorkerId() != "" {
		if err := validateRef(pw, "prefill_worker"); err != nil {
			return err
		}
	}
	return nil
}

func validateKv(v *pb.KvEventRecord) error {
	for i, e := range v.GetEvents() {
		switch ev := e.GetEvent().(type) {
		case *pb.KvEvent_Stored:
			s := ev.Stored
			if len(s.GetBlockHashes()) == 0 {
				return invalid(ReasonKvEvent, "events", "events[%d]: BlockStored without block hashes", i)
			}
			if IsOffloadStore(s) {
				// Names blocks by engine hash only; the state resolves them
				// (statestore/prefix.go), so the block size is not used.
				if s.GetBlockSize() > MaxBlockSize {
					return invalid(ReasonKvEvent, "events", "events[%d]: BlockStored block_size %d over %d", i, s.GetBlockSize(), MaxBlockSize)
				}
				continue
			}
			if s.GetBlockSize() == 0 || s.GetBlockSize() > MaxBlockSize {
				return invalid(ReasonKvEvent, "events", "events[%d]: BlockStored block_size %d out of range [1, %d]", i, s.GetBlockSize(), MaxBlockSize)
			}
			if want := uint64(len(s.GetBlockHashes())) * uint64(s.GetBlockSize()); uint64(len(s.GetTokenIds())) != want {
				return invalid(ReasonKvEvent, "events", "events[%d]: BlockStored has %d token ids for %d blocks of %d: want %d",
					i, len(s.GetTokenIds()), len(s.GetBlockHashes()), s.GetBlockSize(), want)
			}
		case *pb.KvEvent_Removed:
			if len(ev.Removed.GetBlockHashes()) == 0 {
				return invalid(ReasonKvEvent, "events", "events[%d]: BlockRemoved without block hashes", i)
			}
		case *pb.KvEvent_Cleared, *pb.KvEvent_SourceReset, *pb.KvEvent_Unknown:
		default:
			return invalid(ReasonKvEvent, "events", "events[%d]: no event set", i)
		}
	}
	return nil
}

// The bounds of a lifecycle event's measurements, as POST
// /v1/requests/{id}/events takes them and a forwarded event carries them:
// times in milliseconds in [0, MaxLifecycleMs], output tokens in [0,
// MaxOutputTokens].
const (
	MaxLifecycleMs  = 1e9
	MaxOutputTokens = 1 << 40
)

// validateForward checks a forwarded lifecycle event: the ids bounded as in
// every record, one of the three kinds a client may post, and the
// measurements within the HTTP body's bounds, so that what a replica
// applies from the topic is what it would have taken from a client.
func validateForward(v *pb.ForwardedEvent) error {
	if v.GetRequestId() == "" {
		return invalid(ReasonMissingID, "request_id", "forwarded event: request_id is required")
	}
	if v.GetForwardedBy() == "" {
		return invalid(ReasonMissingID, "forwarded_by", "forwarded event for %s: forwarded_by is required", v.GetRequestId())
	}
	if err := maxLen(v.GetRequestId(), "request_id", MaxIDLen); err != nil {
		return err
	}
	if err := maxLen(v.GetForwardedBy(), "forwarded_by", MaxNameLen); err != nil {
		return err
	}
	switch v.GetKind() {
	case pb.OutcomeEvent_KIND_PREFILL_DONE, pb.OutcomeEvent_KIND_COMPLETED, pb.OutcomeEvent_KIND_CANCELLED:
	default:
		return invalid(ReasonKind, "kind", "forwarded event for %s: kind %d is not prefill_done, completed or cancelled", v.GetRequestId(), v.GetKind())
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"ttft_ms", v.TtftMs}, {"itl_ms_mean", v.ItlMsMean}} {
		// NaN fails both comparisons' negation: !(x >= 0) holds for it.
		if f.v != nil && !(*f.v >= 0 && *f.v <= MaxLifecycleMs) {
			return invalid(ReasonNumber, f.name, "forwarded event for %s: %s %v is not in [0, %g]", v.GetRequestId(), f.name, *f.v, float64(MaxLifecycleMs))
		}
	}
	if v.OutputTokens != nil && *v.OutputTokens > MaxOutputTokens {
		return invalid(ReasonNumber, "output_tokens", "forwarded event for %s: output_tokens %d is over %d", v.GetRequestId(), *v.OutputTokens, uint64(MaxOutputTokens))
	}
	return nil
}
