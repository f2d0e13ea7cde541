package events

import (
	"errors"
	"fmt"
)

// Kinds of decode failure. Test them with errors.Is on a *DecodeError; each
// is also the bounded "reason" label of pdrouter_records_invalid_total.
var (
	ErrMissingSchema       = errors.New("missing_schema")
	ErrUnknownSchema       = errors.New("unknown_schema")
	ErrWrongTopic          = errors.New("wrong_topic")
	ErrMalformed           = errors.New("malformed")
	ErrInvalid             = errors.New("invalid")
	ErrTooLarge            = errors.New("too_large")
	ErrUnexpectedTombstone = errors.New("unexpected_tombstone")
)

// DecodeError is a record that could not be decoded. It names the physical
// topic, partition and offset so the record can be found again.
type DecodeError struct {
	Topic     string
	Partition int32
	Offset    int64
	// Kind is one of the Err* sentinels above.
	Kind error
	// Schema is the value of the pdr-schema header, if there was one.
	Schema string
	Err    error
}

func (e *DecodeError) Error() string {
	s := fmt.Sprintf("events: %s record at %s/%d@%d", e.Kind, e.Topic, e.Partition, e.Offset)
	if e.Schema != "" {
		s += fmt.Sprintf(" (schema %q)", e.Schema)
	}
	return s + ": " + e.Err.Error()
}

// Unwrap exposes both the kind and the cause to errors.Is and errors.As.
func (e *DecodeError) Unwrap() []error { return []error{e.Kind, e.Err} }

// Reason is the metric label for an error returned by Decode: the precise
// Reason* of the *ValidationError it carries (every invalid value; a load
// delta's refusals of any kind, LoadDeltaReasons), else the kind.
func Reason(err error) string {
	var de *DecodeError
	if errors.As(err, &de) {
		if r := ValidationReason(de.Err); r != "" {
			return r
		}
		return de.Kind.Error()
	}
	return "other"
}
