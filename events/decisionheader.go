package events

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Field numbers of the bulky parts of a DecisionRecord.
const (
	decisionCandidatesField protowire.Number = 19
	decisionChainsField     protowire.Number = 20
)

// MarshalDecisionHeader encodes d without its candidate table and, unless
// keepChains, without its hash chains: the bytes Marshal gives for a copy
// of d with those fields cleared.
//
// Why: a replica keeps every decision of its retention window for lookups,
// but the table and the chains are ~97% of a record's bytes (26 KB in a
// fleet of 160 workers with 16k-token prompts) and only explain and
// GET /v1/decisions read them, which can fetch the whole record from the
// decisions topic by its position. Storing the header alone keeps the
// store's writes, flushes and compactions to a few hundred bytes a
// decision. Approximate mode keeps the chains: its predicted cache entries
// are rebuilt from them when a replica opens its store.
func MarshalDecisionHeader(d *pb.DecisionRecord, keepChains bool) ([]byte, error) {
	hint := 512 + len(d.GetConfigJson())
	if keepChains {
		hint = decisionSizeHint(d) - 128*len(d.GetCandidates())
	}
	return AppendDecisionHeader(make([]byte, 0, hint), d, keepChains)
}

// AppendDecisionHeader appends MarshalDecisionHeader(d, keepChains) to dst,
// so a caller that frames the header (the store prefixes its position)
// encodes it in place instead of copying it.
func AppendDecisionHeader(dst []byte, d *pb.DecisionRecord, keepChains bool) ([]byte, error) {
	parts := decisionParts(0)
	if keepChains {
		parts = partChains
	}
	if b, ok := appendDecision(dst, d, parts); ok {
		return b, nil
	}
	// Unknown fields, a nil element or invalid UTF-8: the generic encoder
	// decides (it errs on invalid UTF-8), and the parts are cut from its
	// output at the wire level, which keeps unknown fields where it put them.
	whole, err := marshal.Marshal(d)
	if err != nil {
		return nil, err
	}
	return appendStrippedDecision(dst, whole, parts)
}

// appendStrippedDecision appends an encoded DecisionRecord to out without
// the top-level candidates field and, unless parts keeps them, the chains
// field.
func appendStrippedDecision(out, v []byte, parts decisionParts) ([]byte, error) {
	for b := v; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("events: decision record: %w", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, fmt.Errorf("events: decision record field %d: %w", num, protowire.ParseError(m))
		}
		drop := num == decisionCandidatesField || (num == decisionChainsField && parts&partChains == 0)
		if !drop {
			out = append(out, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return out, nil
}
