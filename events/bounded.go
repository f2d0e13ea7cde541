package events

import (
	"errors"

	"google.golang.org/protobuf/proto"
)

// recordBounds are the bounds of a record kind that a hand-written decoder
// reads from a log any writer may append to (load deltas, load shares):
// its size, checked before it is parsed, and its entries, counted before
// they are allocated, with the reasons of their refusals.
type recordBounds struct {
	what                string // the kind, leading each error
	maxBytes            int
	tooLarge, malformed string // reasons
	maxEntries          int
	entries, tooMany    string // the field counted, and the reason past maxEntries
	// errEntries is what unmarshal returns past maxEntries; errTooMany,
	// built once, what the refusal says, so that refusing such a value
	// costs one allocation (the ValidationError).
	errEntries, errTooMany error
}

// decodeBounded parses value with unmarshal, bounded by b, and validates
// it. A value past maxEntries is refused for its entries whatever else it
// holds: that reason wins over the others.
func decodeBounded[M any](value []byte, b *recordBounds, unmarshal func([]byte, int) (M, error), validate func(M) error) (M, error) {
	var none M
	if len(value) > b.maxBytes {
		return none, b.errTooLarge(len(value))
	}
	m, err := unmarshal(value, b.maxEntries)
	if errors.Is(err, b.errEntries) {
		return none, &ValidationError{Reason: b.tooMany, Field: b.entries, Err: b.errTooMany}
	}
	// A refusal the decoder made itself (another bound) stands as it is.
	if ve := (*ValidationError)(nil); errors.As(err, &ve) {
		return none, ve
	}
	if err != nil {
		return none, invalid(b.malformed, "", "%s: %v", b.what, err)
	}
	if err := validate(m); err != nil {
		return none, err
	}
	return m, nil
}

// marshalBounded encodes a valid m with deterministic field order, refusing
// a value past maxBytes as a reader would refuse it.
func marshalBounded(m proto.Message, b *recordBounds) ([]byte, error) {
	v, err := marshal.Marshal(m)
	if err != nil {
		return nil, invalid(b.malformed, "", "%s: %v", b.what, err)
	}
	if len(v) > b.maxBytes {
		return nil, b.errTooLarge(len(v))
	}
	return v, nil
}

func (b *recordBounds) errTooLarge(n int) error {
	return invalid(b.tooLarge, "", "%s: %d bytes, at most %d are allowed", b.what, n, b.maxBytes)
}
