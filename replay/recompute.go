package replay

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Recompute decides a record again from its own inputs (its candidate table,
// through RecordView) under cfg, with the decider version the record was
// decided with. With the record's own config (ParseConfig(rec.ConfigJson))
// the result must be the recorded decision; with another config it is the
// counterfactual of WhatIf and Tune.
func Recompute(rec *pb.DecisionRecord, cfg decider.Config) (*decider.Decision, error) {
	dc, err := deciderFor(cfg, rec)
	if err != nil {
		return nil, err
	}
	return RecomputeWith(dc, rec, new(decider.Decision))
}

// RecomputeWith is Recompute with a prepared decider and a reused Decision,
// for replays over many records: dst's memory is reused, so the result is
// only valid until the next call with the same dst.
func RecomputeWith(dc *decider.Decider, rec *pb.DecisionRecord, dst *decider.Decision) (*decider.Decision, error) {
	if err := dc.DecideInto(dst, NewRecordView(rec), RequestOf(rec)); err != nil {
		return nil, fmt.Errorf("replay: recompute decision %s: %w", rec.GetDecisionId(), err)
	}
	return dst, nil
}

// PureCheck is the result of recomputing a decision from its record alone.
type PureCheck struct {
	// Identical: the recomputed decision encodes (decider canonical JSON)
	// to the same bytes as the decision read from the record.
	Identical bool `json:"identical"`
	// RecordBytesIdentical: re-encoding the recomputed decision into the
	// record gives the record's exact Protobuf bytes.
	RecordBytesIdentical bool `json:"record_bytes_identical"`
	// ConfigHashMatches: config_json hashes to the recorded config_hash.
	ConfigHashMatches bool `json:"config_hash_matches"`
	// Differences lists every field that differs, with its likely cause.
	Differences []Difference `json:"differences"`
	// Error is set when the record could not be recomputed at all.
	Error string `json:"error,omitempty"`
}

// CheckPure recomputes rec under its own config and compares canonically.
// It returns the recomputed decision too (nil when it could not be made).
func CheckPure(rec *pb.DecisionRecord) (PureCheck, *decider.Decision) {
	pc := PureCheck{Differences: []Difference{}}
	cfg, err := ParseConfig(rec.GetConfigJson())
	if err != nil {
		pc.Error = err.Error()
		return pc, nil
	}
	pc.ConfigHashMatches = cfg.Hash() == rec.GetConfigHash()
	got, err := Recompute(rec, cfg)
	if err != nil {
		pc.Error = err.Error()
		return pc, nil
	}
	pc.Differences = Compare(DecisionOf(rec), got)
	pc.Identical = len(pc.Differences) == 0
	attributePure(rec, &pc)

	want, err1 := events.Marshal(rec)
	again, err2 := events.Marshal(RecordOf(got, rec))
	pc.RecordBytesIdentical = err1 == nil && err2 == nil && bytes.Equal(want, again)
	if pc.Identical && !pc.RecordBytesIdentical {
		pc.Differences = append(pc.Differences, Difference{Field: "record_bytes",
			Cause: "the decision is identical but the record's bytes are not: the record holds fields this build does not write (a newer schema, or bytes added after the decision)"})
	}
	return pc, got
}

// attributePure gives each difference of a pure check its likely cause.
// A recompute reads only the record, so a difference means the record is
// not what this build's decider makes from the record's own inputs: another
// decider version, a config_json that is not the config that decided, or a
// record altered after the decision. Fields computed from other differing
// fields are marked as following from them, so the root stands out.
func attributePure(rec *pb.DecisionRecord, pc *PureCheck) {
	version := !decider.SupportsVersion(rec.GetDeciderVersion())
	// Softmax draws over every eligible row: a record that left rows out
	// cannot reproduce its probabilities, nor the draw that followed.
	partialDraw := false
	if cfg, err := ParseConfig(rec.GetConfigJson()); err == nil && cfg.Temperature > 0 && omittedRows(rec) {
		partialDraw = true
	}
	upstream := false // a candidate-level difference exists
	for i := range pc.Differences {
		if isCandidateField(pc.Differences[i].Field) {
			upstream = true
		}
	}
	for i := range pc.Differences {
		d := &pc.Differences[i]
		leaf := leafName(d.Field)
		switch {
		case version:
			d.Cause = fmt.Sprintf("the record was decided by decider version %d and this build recomputes versions 1 to %d (with %d here): its semantics may differ", rec.GetDeciderVersion(), DeciderVersion, DeciderVersion)
		case partialDraw:
			d.Cause = "the record left candidate rows out to stay within its size budget, and at temperature > 0 the probabilities and the draw were over every eligible row: they cannot be recomputed from the kept rows"
		case d.Field == "config_hash" && !pc.ConfigHashMatches:
			d.Cause = "config_json does not hash to the recorded config_hash: the recorded config is not the one that decided (altered, or written by another encoding)"
		case isCandidateField(d.Field) && !strings.Contains(d.Field, "]."):
			d.Cause = "the row is in one table and not the other: the recorded table does not list the workers its own view had"
		case isCandidateField(d.Field) && leaf == "tie_hash":
			d.Cause = "tie_hash is hash(request id, worker id): the record's request id or worker id was changed after the decision"
		case isCandidateField(d.Field) && (leaf == "picked" || leaf == "probability"):
			d.Cause = "the selection follows from the costs: see the cost differences"
		case isCandidateField(d.Field) && isDerivedCandidateField(leaf):
			d.Cause = fmt.Sprintf("the recorded %s does not follow from the row's own recorded inputs under the recorded config: the record was altered, or written by a build with other cost arithmetic", leaf)
		case isCandidateField(d.Field):
			d.Cause = "the decider adjusted this recorded input (an overlap or shared count longer than the request's hash chain is clamped): the record is inconsistent with its own chain"
		case upstream:
			d.Cause = "follows from the candidate differences"
		default:
			d.Cause = fmt.Sprintf("the recorded %s does not follow from the candidate table under the recorded config: the record was altered after the decision, or config_json is not the config that decided", leaf)
		}
	}
}

func isCandidateField(f string) bool {
	return len(f) > len("candidates") && f[:len("candidates")] == "candidates"
}

// isDerivedCandidateField: the terms the decider computes for a row (as
// opposed to the inputs the view supplied).
func isDerivedCandidateField(leaf string) bool {
	switch leaf {
	case "raw_prefill_blocks", "overlap_credit", "prefill_term", "request_blocks", "potential_decode_blocks", "cost":
		return true
	}
	return false
}
