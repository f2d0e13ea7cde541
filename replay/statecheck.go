package replay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// StateCheck is the result of rebuilding the state at a record's watermark
// and deciding again from it (invariant 6, the state check).
type StateCheck struct {
	// Performed is false when the check did not run; NotPerformed says why.
	Performed    bool   `json:"performed"`
	NotPerformed string `json:"not_performed,omitempty"`
	// Error is set when the check ran but could not finish.
	Error string `json:"error,omitempty"`
	// Identical: deciding from the state at the watermark gives the record.
	Identical bool `json:"identical"`
	// IdenticalWithInFlight: it does once the deciding replica's in-flight
	// decisions (InFlight) are counted as that replica counted them.
	IdenticalWithInFlight bool `json:"identical_with_in_flight"`
	// Explained: every difference has a cause the check could establish.
	Explained bool         `json:"explained"`
	Rebuild   *RebuildInfo `json:"rebuild,omitempty"`
	// Differences between the record and the decision from the rebuilt
	// state (before counting in-flight decisions), each with its cause.
	Differences []Difference `json:"differences"`
	// InFlight are the replica's own decisions not yet in the log state at
	// the watermark that reproduce the record when counted.
	InFlight []InFlight `json:"in_flight,omitempty"`
	// Causes summarizes the distinct causes.
	Causes []string `json:"causes,omitempty"`
	// Scope says what was compared when the record is truncated (it left
	// candidate rows or hash-chain blocks out): only what it kept.
	Scope []string `json:"scope,omitempty"`
}

// KafkaStateChecker runs the state check against a Kafka log: it rebuilds
// the state at the watermark in a temporary Pebble store, from the newest
// snapshot at or before the watermark when there is one.
type KafkaStateChecker struct {
	// Client holds the connection options (kafkaconn.Config.Opts).
	Client []kgo.Opt
	Names  events.Names
	// SnapshotDir holds snapshots (<data-dir>/snapshots); "" for none.
	SnapshotDir string
	// TempDir is where the temporary store goes; "" for the system's.
	TempDir string
	// Logger receives progress of long rebuilds; nil for none.
	Logger *slog.Logger
}

// unexplained prefixes causes the check could not establish.
const unexplained = "unexplained: "

// CheckState implements StateChecker.
func (k *KafkaStateChecker) CheckState(ctx context.Context, rec *pb.DecisionRecord) StateCheck {
	sc := StateCheck{Performed: true, Differences: []Difference{}}
	cfg, err := ParseConfig(rec.GetConfigJson())
	if err != nil {
		sc.Error = err.Error()
		return sc
	}
	dc, err := deciderFor(cfg, rec)
	if err != nil {
		sc.Error = err.Error()
		return sc
	}
	opts := storeOptions(k.Names, cfg)
	// The writer whose own requests the state holds, when the decision's
	// replica shared its load as snapshots (rebuildAt).
	opts.ReplicaID = rec.GetReplicaId()
	r, err := rebuildAt(ctx, k.Client, opts, rec.GetWatermark(), k.SnapshotDir, k.TempDir, k.Logger)
	if err != nil {
		sc.Error = fmt.Sprintf("rebuilding the state at the watermark: %v", err)
		return sc
	}
	defer r.Close()
	sc.Rebuild = &r.info
	req := stateRequest(rec)
	got, err := r.decide(dc, req)
	if err != nil {
		sc.Error = fmt.Sprintf("deciding from the rebuilt state: %v", err)
		return sc
	}
	recorded, scope, err := stateExpectation(rec, cfg)
	if err != nil {
		sc.Error = fmt.Sprintf("recomputing the record over the hash-chain prefix it keeps: %v", err)
		return sc
	}
	sc.Scope = scope
	sc.Differences = Compare(recorded, sameRows(rec, got))
	if len(sc.Differences) == 0 {
		sc.Identical, sc.IdenticalWithInFlight, sc.Explained = true, true, true
		return sc
	}

	// Not identical. The expected cause is the replica's own in-flight
	// decisions: find them, count them as the replica did, decide again.
	// Which of them the replica had counted when it read its view depends on
	// the order its concurrent requests finished appending, which the log
	// does not record; candidateSubsets narrows the sets worth trying
	// (inflightsearch.go), and each is tried on the rebuilt store.
	remaining := sc.Differences
	cl, err := kgo.NewClient(k.Client...)
	if err != nil {
		sc.Error = err.Error()
		return sc
	}
	bounds, err := listBounds(ctx, kadm.NewClient(cl), k.Names, events.TopicDecisions)
	cl.Close()
	var inflight []InFlight
	if err == nil {
		inflight, err = findInFlight(ctx, k.Client, k.Names, rec, bounds)
	}
	if err != nil {
		sc.Error = fmt.Sprintf("looking for the replica's in-flight decisions: %v", err)
	}
	cands := relevantInFlight(inflight, sc.Differences)
	for _, subset := range candidateSubsets(cands, recorded, sameRows(rec, got)) {
		if err := r.reopen(); err != nil {
			sc.Error = err.Error()
			break
		}
		counted := make([]InFlight, 0, len(subset))
		for _, i := range subset {
			counted = append(counted, cands[i])
			_ = r.store.RecordLocalDecision(cands[i].rec)
		}
		again, err := r.decide(dc, req)
		if err != nil {
			continue
		}
		left := Compare(recorded, sameRows(rec, again))
		if len(left) < len(remaining) {
			remaining = left
		}
		if len(left) == 0 {
			sc.IdenticalWithInFlight = true
			sc.InFlight = counted
			break
		}
	}
	attributeState(rec, cfg, &sc, remaining, inflight)
	return sc
}

// stateRequest is the request as the API built it: the record's own hash
// chains, which the rebuilt index is matched against. Without chains the
// request carries none, and every overlap is zero (and reported).
func stateRequest(rec *pb.DecisionRecord) *decider.Request {
	req := &decider.Request{ID: rec.GetRequestId(), Model: rec.GetModel(), PromptTokens: int64(rec.GetPromptTokens())}
	for _, c := range rec.GetChains() {
		req.Chains = append(req.Chains, decider.Chain{BlockSize: int(c.GetBlockSize()), Hashes: c.GetBlockHashes()})
	}
	return req
}

// attributeState gives each difference of the state check its cause.
// remaining are the differences still there after counting in-flight
// decisions; a difference not among them was caused by those decisions.
func attributeState(rec *pb.DecisionRecord, cfg decider.Config, sc *StateCheck, remaining []Difference, inflight []InFlight) {
	left := map[string]bool{}
	for _, d := range remaining {
		left[d.Field] = true
	}
	rowInputDiff := map[string]bool{} // candidate rows with an input difference left
	for _, d := range remaining {
		if isCandidateField(d.Field) && !isDerivedCandidateField(leafName(d.Field)) {
			rowInputDiff[rowOf(d.Field)] = true
		}
	}
	counted := sc.InFlight
	if !sc.IdenticalWithInFlight {
		counted = inflight
	}
	gone := sc.Rebuild != nil && len(sc.Rebuild.HistoryGone) > 0
	for i := range sc.Differences {
		d := &sc.Differences[i]
		leaf := leafName(d.Field)
		cand := isCandidateField(d.Field)
		switch {
		case !left[d.Field] && cand:
			ids := touching(counted, d.Worker)
			d.Cause = fmt.Sprintf("replica-local in-flight decision: replica %s had counted %s on %s at once, before the decisions topic had it at the watermark (conditional-disagg.md: a replica counts its own decision at once)",
				rec.GetReplicaId(), describeIDs(ids, len(counted)), d.Worker)
		case !left[d.Field]:
			d.Cause = "follows from the in-flight differences of the candidate table"
		case cand && !strings.Contains(d.Field, "]."):
			d.Cause = "the registry differs: the worker is in one table and not the other" + historyNote(gone, sc)
		case cand && isDerivedCandidateField(leaf), cand && (leaf == "picked" || leaf == "probability"):
			if rowInputDiff[rowOf(d.Field)] {
				d.Cause = "follows from this row's input differences"
			} else {
				d.Cause = "follows from the cost differences of other rows"
			}
		case cand && (leaf == "overlap_blocks" || leaf == "host_blocks" || leaf == "disk_blocks"):
			switch {
			case len(rec.GetChains()) == 0:
				d.Cause = "the record carries no hash chains, so the rebuilt index could not be asked for this request's overlap"
			case gone:
				d.Cause = "the record's overlap differs from the rebuilt overlap because kv-events history below the watermark is gone" + historyNote(gone, sc)
			case cfg.Approximate():
				d.Cause = unexplained + "the record's overlap differs from the rebuilt overlap in approximate mode (predicted entries of decisions older than the replica's --approximate TTL setting?)"
			default:
				d.Cause = unexplained + fmt.Sprintf("the record's overlap (%s) differs from the rebuilt overlap (%s): the replica's prefix index at the watermark was not the one the log gives", d.Record, d.Other)
			}
		case cand && strings.HasPrefix(leaf, "load_"):
			if gone {
				d.Cause = "the load history below the watermark is incomplete" + historyNote(gone, sc)
			} else {
				d.Cause = "the load sample differs: the deciding replica hides samples older than its load max age, which the record's config does not carry"
			}
		case cand && (leaf == "active_decode_blocks" || leaf == "active_prefill_tokens" || leaf == "shared_active_blocks"):
			switch {
			case gone:
				d.Cause = "router-side accounting differs because decision or outcome history below the watermark is gone" + historyNote(gone, sc)
			case len(inflight) > 0:
				d.Cause = unexplained + fmt.Sprintf("router-side accounting differs, and counting the replica's %d in-flight decisions does not account for it", len(inflight))
			default:
				d.Cause = unexplained + "router-side accounting differs and the replica had no in-flight decision: the state at the watermark is not what the replica read"
			}
		case cand:
			if gone {
				d.Cause = "the registry differs" + historyNote(gone, sc)
			} else {
				d.Cause = unexplained + "the registry entry differs from the one the log gives at the watermark"
			}
		default:
			if len(remaining) > 0 && anyCandidate(remaining) {
				d.Cause = "follows from the candidate differences"
			} else {
				d.Cause = unexplained + "the decision differs though every candidate row agrees: the decider is not a function of its inputs"
			}
		}
	}
	sc.Explained = true
	seen := map[string]bool{}
	for _, d := range sc.Differences {
		if strings.HasPrefix(d.Cause, unexplained) {
			sc.Explained = false
		}
		c := d.Cause
		if strings.HasPrefix(c, "follows from") {
			continue
		}
		if !seen[c] {
			seen[c] = true
			sc.Causes = append(sc.Causes, c)
		}
	}
	slices.Sort(sc.Causes)
}

func rowOf(field string) string {
	if i := strings.Index(field, "]"); i >= 0 {
		return field[:i+1]
	}
	return field
}

func anyCandidate(ds []Difference) bool {
	for _, d := range ds {
		if isCandidateField(d.Field) {
			return true
		}
	}
	return false
}

// touching returns the ids of the in-flight decisions that load worker w
// (as decode worker, or as prefill worker of a remote prefill).
func touching(fs []InFlight, w string) []string {
	var ids []string
	for _, f := range fs {
		if f.DecodeWorker == w || (f.Mode == string(decider.ModeRemote) && f.PrefillWorker == w) {
			ids = append(ids, f.DecisionID)
		}
	}
	return ids
}

func describeIDs(ids []string, total int) string {
	switch len(ids) {
	case 0:
		return fmt.Sprintf("%d in-flight decision(s) sharing its blocks", total)
	case 1:
		return "decision " + ids[0]
	case 2, 3:
		return "decisions " + strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%d decisions (%s, …)", len(ids), strings.Join(ids[:3], ", "))
}

func historyNote(gone bool, sc *StateCheck) string {
	if !gone {
		return ""
	}
	return " (" + strings.Join(sc.Rebuild.HistoryGone, "; ") + ")"
}
