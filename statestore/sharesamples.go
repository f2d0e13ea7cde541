package statestore

import (
	"slices"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/latmodel"
)

// Latency samples with the snapshots (docs/scaling.md, "Load shares"). A
// store of SourceLoadShares holds only its own requests, so its latency
// model would learn from them alone. Instead, when one of its requests
// ends, its writer sends what its model joined of it (latmodel.Joined)
// with the next snapshot, and every peer learns it (latmodel.Learn): each
// replica's model learns from the group's requests, as in a group that
// applies every decision.
//
// Invariants, kept here:
//
//   - A writer sends only what its model holds, so only the ids of its
//     model's sample (latmodel, sample.go), and of those at most its
//     budget (below): a peer learns a subset of the group's requests, all
//     of its own.
//   - A peer applies a sample as the facts it stands for, each with the
//     model's clock moved to its time first, so what it learns is a
//     function of the samples' content, never of when it reads them; a
//     sample read twice (a record read again, an id sent again after a
//     restart) adds nothing, as a fact seen twice adds nothing.
//   - A writer learns nothing from its own samples: it holds their facts.
//   - The ids waiting to be sent are bounded (maxEnded): past it the
//     oldest are dropped and counted, never the model's state.
//   - A writer sends at most Options.LatencySamplesPerSecond samples a
//     second of its requests' event time (sampleBudget): a peer's apply of
//     a sample costs about what its apply of a whole snapshot does, and a
//     fit of the model's ten features needs far fewer samples than a busy
//     group's requests. The budget reads event times alone, so which
//     samples a writer sends is a function of its own partition.

// maxEnded bounds the decision ids waiting to be sent: a minute of a
// replica's requests at 1,000 a second beyond what its snapshots carry.
const maxEnded = 1 << 16

// DefaultLatencySamplesPerSecond is Options.LatencySamplesPerSecond's
// default: 100 a writer, 30,000 over the model's 10-minute window, where
// a path's fit needs 50 (slo_min_samples); a group of 8 then costs a peer
// 700 samples a second however fast it decides.
const DefaultLatencySamplesPerSecond = 100

// sampleBudget lets through at most perSec samples a second of event
// time, with a burst of one second's worth, in integer nanoseconds of
// credit so that every replica computes it alike.
type sampleBudget struct {
	cost   int64 // credit a sample takes: 1e9/perSec; 0: none let through
	credit int64 // at most 1e9
	at     int64 // event time of the last refill
}

func newSampleBudget(perSec int) sampleBudget {
	if perSec <= 0 {
		return sampleBudget{}
	}
	return sampleBudget{cost: max(int64(time.Second)/int64(perSec), 1), credit: int64(time.Second)}
}

// take reports whether a sample of a request that ended at t goes.
func (b *sampleBudget) take(t int64) bool {
	if b.cost == 0 {
		return false
	}
	if t > b.at {
		b.credit = min(b.credit+(t-b.at), int64(time.Second))
		b.at = t
	}
	if b.credit < b.cost {
		return false
	}
	b.credit -= b.cost
	return true
}

// requestEnded queues the latency sample of a request of this writer that
// ended (a completed or cancelled lifecycle event), for the next snapshot,
// when its model joined the request and the budget lets it through.
func (st *state) requestEnded(o *pb.OutcomeEvent) {
	own := st.own
	if own == nil || o.GetDecisionId() == "" {
		return
	}
	if k := o.GetKind(); k != pb.OutcomeEvent_KIND_COMPLETED && k != pb.OutcomeEvent_KIND_CANCELLED {
		return
	}
	if _, ok := st.lat.Joined(o.GetDecisionId()); !ok {
		return // nothing joined to send: no budget spent on it
	}
	if !own.samples.take(o.GetEventTimeUnixNano()) {
		st.stats.samplesThinned++
		return
	}
	if len(own.ended) >= maxEnded {
		drop := len(own.ended) - maxEnded + 1
		st.stats.samplesDropped += int64(drop)
		own.ended = slices.Delete(own.ended, 0, drop)
	}
	if len(own.ended) == 0 && len(own.dirty) == 0 && len(own.resend) == 0 {
		own.signal()
	}
	own.ended = append(own.ended, strings.Clone(o.GetDecisionId()))
}

// takeSamples takes the samples of the next snapshot: up to
// events.MaxSamplesSent of the ended requests, in the order they ended,
// each id once, those the model holds no sample of left out.
func (st *state) takeSamples() []*pb.LatencySample {
	own := st.own
	if len(own.ended) == 0 {
		return nil
	}
	var out []*pb.LatencySample
	i := 0
	for ; i < len(own.ended) && len(out) < events.MaxSamplesSent; i++ {
		id := own.ended[i]
		j, ok := st.lat.Joined(id)
		if !ok || slices.ContainsFunc(out, func(s *pb.LatencySample) bool { return s.GetDecisionId() == id }) {
			continue
		}
		out = append(out, sampleOf(id, &j))
	}
	st.stats.samplesSent += int64(len(out))
	own.ended = slices.Delete(own.ended, 0, i)
	if len(own.ended) > 0 {
		own.signal() // the writer comes back for them
	}
	return out
}

// samplesNotSent puts the samples of a snapshot the log did not take back
// in front of the ones waiting.
func (st *state) samplesNotSent(ss []*pb.LatencySample) {
	if len(ss) == 0 {
		return
	}
	ids := make([]string, len(ss))
	for i, s := range ss {
		ids[i] = strings.Clone(s.GetDecisionId())
	}
	st.own.ended = slices.Insert(st.own.ended, 0, ids...)
}

// sampleOf is the record of what the model joined of decision id.
func sampleOf(id string, j *latmodel.Joined) *pb.LatencySample {
	s := &pb.LatencySample{DecisionId: id, DecidedAtUnixNano: j.DecidedAt, LatencyPath: uint32(j.Path),
		LatencyInputs: make([]uint32, len(j.Inputs))}
	for i, x := range j.Inputs {
		s.LatencyInputs[i] = uint32(x) // within [0, 2^20]: the model clamps its features
	}
	if j.HasTTFT {
		u := uint32(j.TTFT)
		s.TtftUnits, s.TtftAtUnixNano = &u, j.TTFTAt
	}
	if j.HasITL {
		u := uint32(j.ITL)
		s.ItlUnits, s.ItlAtUnixNano = &u, j.ITLAt
	}
	return s
}

// learnSamples applies a peer's samples to the model.
func (st *state) learnSamples(ss []*pb.LatencySample) {
	for _, s := range ss {
		j := latmodel.Joined{DecidedAt: s.GetDecidedAtUnixNano(), Path: decider.LatencyPath(s.GetLatencyPath())}
		for i, x := range s.GetLatencyInputs() {
			if i < len(j.Inputs) { // exactly as many: validated
				j.Inputs[i] = int64(x)
			}
		}
		if s.TtftUnits != nil {
			j.HasTTFT, j.TTFTAt, j.TTFT = true, s.GetTtftAtUnixNano(), int64(s.GetTtftUnits())
		}
		if s.ItlUnits != nil {
			j.HasITL, j.ITLAt, j.ITL = true, s.GetItlAtUnixNano(), int64(s.GetItlUnits())
		}
		st.lat.Learn(s.GetDecisionId(), &j)
		st.stats.samplesLearned++
		st.learnedSamples = true
	}
}
