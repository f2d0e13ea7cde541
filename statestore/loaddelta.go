package statestore

import (
	"github.com/cockroachdb/pebble/v2"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Load deltas (docs/scaling.md, "Load deltas"; design.md, invariants
// D1-D5): the compact facts a replica publishes for each decision and
// lifecycle event it appends, which peers apply instead of the whole
// DecisionRecord and OutcomeEvent when the group shares load that way
// (Options.Source == SourceLoadDeltas).
//
// One reading of a record. The writer builds an entry with DecisionDeltaOf,
// from the record by the very rules apply reads it with (activeChain,
// latencySample); apply turns the entry back into the record those rules
// read (recordOfDelta) and runs the same apply functions. So a decision
// counts the same on a replica of either source, but for the one bounded
// approximation: a chain longer than events.MaxDeltaHashes is cut, and the
// blocks past the cut count as blocks without a hash (active blocks stay
// exact; MatchActive sees at most the first MaxDeltaHashes blocks).
// TestLoadDeltaStateMatchesDecisions holds the two sources equal.

// Source is what a store learns peers' decisions and lifecycle events from.
type Source uint8

const (
	// SourceDecisions applies the decisions and outcomes topics (whole
	// records) and ignores load-deltas.
	SourceDecisions Source = iota
	// SourceLoadDeltas applies the load-deltas topic and ignores decisions
	// and outcomes, which stay on the log for audit, explain and export.
	SourceLoadDeltas
	// SourceLoadShares keeps peers' load as rows of their snapshots
	// (shares.go), from the load-shares topic, and the replica's own
	// requests from its own partition of load-deltas: a peer fetches one
	// record per group commit of each writer, not one per decision.
	SourceLoadShares
)

func (s Source) String() string {
	switch s {
	case SourceLoadDeltas:
		return "load-deltas"
	case SourceLoadShares:
		return "load-shares"
	}
	return "decisions"
}

// Topics returns the topics a store of this source applies, in
// events.AllTopics order.
func (s Source) Topics() []events.Topic {
	out := make([]events.Topic, 0, len(events.AllTopics))
	for _, t := range events.AllTopics {
		if s.Applies(t) {
			out = append(out, t)
		}
	}
	return out
}

// Applies reports whether a store of this source applies topic t.
func (s Source) Applies(t events.Topic) bool {
	switch t {
	case events.TopicDecisions, events.TopicOutcomes:
		return s == SourceDecisions
	case events.TopicLoadDeltas:
		return s == SourceLoadDeltas || s == SourceLoadShares
	case events.TopicLoadShares:
		return s == SourceLoadShares
	case events.TopicForwards:
		// Forwarded lifecycle events are read by the API's forward reader,
		// which appends what they mean to the deciding replica's own
		// partitions; a store applies that, never the forward.
		return false
	}
	return true
}

// fallbackBlockSize stands in for the block size of a record that names
// none (no candidate row of its decode worker and no chain): pdrouter's
// own records always carry the row, and a delta needs a block size.
const fallbackBlockSize = 16

// DecisionDeltaOf returns the load delta entry of a decision record: what
// apply reads of it, with the chain cut to events.MaxDeltaHashes.
func DecisionDeltaOf(d *pb.DecisionRecord) *pb.DecisionDelta {
	chain, bs, prow := activeChain(d)
	p := d.GetPromptTokens()
	e := &pb.DecisionDelta{
		DecisionId: d.GetDecisionId(), RequestId: d.GetRequestId(), DecidedAtUnixNano: d.GetDecidedAtUnixNano(),
		DecodeWorker: d.GetDecodeWorker(), Local: d.GetMode() == string(decider.ModeLocal),
		BlockSize: bs, PromptTokens: p, EffectiveIsl: min(d.GetEffectiveIsl(), p),
	}
	if bs == 0 {
		e.BlockSize = fallbackBlockSize
		chain = nil
	}
	if !e.Local {
		if pw := d.GetPrefillWorker(); pw != nil && pw.GetWorkerId() != "" {
			e.PrefillWorker = pw
			if prow != nil {
				e.PrefillCachedTokens = uint32(min(uint64(prow.GetOverlapBlocks())*uint64(prow.GetBlockSize()), uint64(p)))
			}
		}
	}
	n := min(len(chain), events.MaxDeltaHashes, int(p/e.BlockSize))
	e.ActiveHashes = chain[:n:n]
	if path, in, ok := latencySample(d); ok {
		var x [decider.LatencyK]int64
		in.Vector(&x)
		e.LatencyPath = uint32(path)
		e.LatencyInputs = make([]uint32, decider.LatencyK-1)
		for i := range e.LatencyInputs {
			e.LatencyInputs[i] = uint32(x[i+1]) // clamped to MaxLatencyFeature
		}
	}
	return e
}

// LifecycleDeltaOf returns the load delta entry of a lifecycle event.
func LifecycleDeltaOf(o *pb.OutcomeEvent) *pb.LifecycleDelta {
	return &pb.LifecycleDelta{
		DecisionId: o.GetDecisionId(), RequestId: o.GetRequestId(), Kind: o.GetKind(),
		EventTimeUnixNano: o.GetEventTimeUnixNano(), DecodeWorker: o.GetDecodeWorker(),
		TtftMs: o.TtftMs, ItlMsMean: o.ItlMsMean, OutputTokens: o.OutputTokens,
	}
}

// recordOfDelta is the decision record apply reads an entry as: the rows
// and chain activeChain takes, nothing else of the table.
func recordOfDelta(e *pb.DecisionDelta, chain []uint64) *pb.DecisionRecord {
	mode := decider.ModeRemote
	if e.GetLocal() {
		mode = decider.ModeLocal
	}
	d := &pb.DecisionRecord{
		DecisionId: e.GetDecisionId(), RequestId: e.GetRequestId(), DecidedAtUnixNano: e.GetDecidedAtUnixNano(),
		DecodeWorker: e.GetDecodeWorker(), PrefillWorker: e.GetPrefillWorker(), Mode: string(mode),
		PromptTokens: e.GetPromptTokens(), EffectiveIsl: e.GetEffectiveIsl(),
		Candidates: []*pb.Candidate{{Pool: pb.Pool_POOL_DECODE, Worker: e.GetDecodeWorker(), BlockSize: e.GetBlockSize()}},
	}
	if pw := e.GetPrefillWorker(); pw != nil {
		// Block size 1: the overlap is the cached tokens themselves.
		d.Candidates = append(d.Candidates, &pb.Candidate{Pool: pb.Pool_POOL_PREFILL, Worker: pw, BlockSize: 1, OverlapBlocks: e.GetPrefillCachedTokens()})
	}
	if len(chain) > 0 {
		d.Chains = []*pb.HashChain{{BlockSize: e.GetBlockSize(), BlockHashes: chain}}
	}
	return d
}

// outcomeOfDelta is the lifecycle event apply reads an entry as.
func outcomeOfDelta(e *pb.LifecycleDelta) *pb.OutcomeEvent {
	return &pb.OutcomeEvent{
		RequestId: e.GetRequestId(), DecisionId: e.GetDecisionId(), Kind: e.GetKind(),
		EventTimeUnixNano: e.GetEventTimeUnixNano(), DecodeWorker: e.GetDecodeWorker(),
		TtftMs: e.TtftMs, ItlMsMean: e.ItlMsMean, OutputTokens: e.OutputTokens,
	}
}

// applyLoadDelta applies a validated record at (partition, offset) of the
// load-deltas topic: its decisions in order, then its lifecycle events,
// each by the rules of the record it stands for. The entries' facts are a
// set (active.go, "Order independence"), so their order within the record
// does not change the state.
func (st *state) applyLoadDelta(b *pebble.Batch, d *pb.LoadDelta, partition int32, offset int64) {
	if st.act.cfg.open {
		st.applyOpenDelta(d, partition, offset, st.replaying)
		return
	}
	chains := events.LoadDeltaChains(d)
	for i, e := range d.GetDecisions() {
		r := recordOfDelta(e, chains[i])
		st.observe(r.GetDecidedAtUnixNano(), true)
		st.applyDecision(b, r, partition, offset)
		st.applyDeltaDecisionLog(b, r, partition, offset)
		st.learnDelta(e)
	}
	for _, e := range d.GetLifecycle() {
		o := outcomeOfDelta(e)
		st.observe(o.GetEventTimeUnixNano(), true)
		st.applyOutcome(b, o)
		st.learnOutcome(o)
		st.requestEnded(o)
	}
}

// learnDelta is learnDecision for an entry: the latency features the
// writer read from the record's rows.
func (st *state) learnDelta(e *pb.DecisionDelta) {
	st.lat.Advance(st.reqNow)
	x := e.GetLatencyInputs()
	if len(x) != decider.LatencyK-1 {
		st.stats.latNoRow++
		return
	}
	var v [decider.LatencyK - 1]int64
	for i := range v {
		v[i] = int64(x[i])
	}
	in := decider.LatencyInputsOf(&v)
	st.lat.Decision(e.GetDecisionId(), e.GetDecidedAtUnixNano(), decider.LatencyPath(e.GetLatencyPath()), &in)
}
