package ingest

import (
	"errors"
	"fmt"
)

// Reasons a batch cannot be decoded. Each is a bounded label value of
// pdrouter_ingest_decode_errors_total{reason}.
const (
	ReasonTooLarge    = "too_large"       // payload over MaxPayloadBytes
	ReasonTruncated   = "truncated"       // the payload ends inside a value
	ReasonBadMsgpack  = "bad_msgpack"     // a byte that is no msgpack type
	ReasonTooDeep     = "too_deep"        // nesting deeper than any engine sends
	ReasonNotArray    = "batch_not_array" // the batch is neither a msgpack array nor a map
	ReasonBatchLength = "batch_length"    // fewer than 2 batch elements, or a map batch without ts or events
	ReasonTimestamp   = "bad_timestamp"   // element 0 is not a usable number
	ReasonEvents      = "bad_events"      // element 1 is not an array
	ReasonDPRank      = "bad_dp_rank"     // element 2 is neither nil nor a rank
	ReasonTrailing    = "trailing_bytes"  // bytes after the batch
	ReasonEventShape  = "bad_event_shape" // an event that is neither array nor map
	ReasonTag         = "bad_tag"         // an event tag that is not a string
	ReasonField       = "bad_field"       // a known field with the wrong type
	// ReasonInvalid is a batch that decodes but breaks a bound every replica
	// applies (events.ValidateAt): an event time ahead of ingest's clock, a
	// dp rank past events.MaxDPSize. Writing it would fail, and stop ingest.
	ReasonInvalid = "invalid_batch"
	// reasonOther: an error that is no DecodeError (ErrorReason).
	reasonOther = "other"
)

// decodeErrorReasons are the values ErrorReason returns, each a series at 0
// from the start.
var decodeErrorReasons = [...]string{ReasonTooLarge, ReasonTruncated, ReasonBadMsgpack, ReasonTooDeep, ReasonNotArray,
	ReasonBatchLength, ReasonTimestamp, ReasonEvents, ReasonDPRank, ReasonTrailing, ReasonEventShape, ReasonTag,
	ReasonField, ReasonInvalid, reasonOther}

// Reasons an event is demoted to UnknownEvent (see the package
// documentation). Bounded label values of
// pdrouter_ingest_events_demoted_total{reason}.
const (
	DemoteTokenCount = "token_count_mismatch"
	DemoteNoHashes   = "no_block_hashes"
	DemoteBlockSize  = "block_size_range"
	DemoteTokenRange = "token_id_range"
)

// demoteReasons are the Demote* reasons, each a series at 0 from the start.
var demoteReasons = [...]string{DemoteTokenCount, DemoteNoHashes, DemoteBlockSize, DemoteTokenRange}

// DecodeError says what is wrong with a batch and where: the byte offset in
// the payload, the event index and the field. An operator can find the bytes
// again in the raw payload that ingest writes next to the reset it causes.
type DecodeError struct {
	// Reason is one of the Reason* constants.
	Reason string
	// Event is the index of the event in the batch, or -1 for the batch
	// itself.
	Event int
	// Field is the event field being read, if any.
	Field string
	// Offset is the byte offset in the payload.
	Offset int
	Err    error
}

func (e *DecodeError) Error() string {
	where := fmt.Sprintf("byte %d", e.Offset)
	if e.Event >= 0 {
		where += fmt.Sprintf(", event %d", e.Event)
	}
	if e.Field != "" {
		where += ", field " + e.Field
	}
	return fmt.Sprintf("ingest: %s at %s: %v", e.Reason, where, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// ErrorReason is the metric label of an error from DecodeBatch, or "other".
func ErrorReason(err error) string {
	var de *DecodeError
	if errors.As(err, &de) {
		return de.Reason
	}
	return reasonOther
}
