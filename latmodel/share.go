package latmodel

import "github.com/pdrouter/pdrouter/decider"

// Sharing what the model joined (docs/scaling.md, "Load shares"): a
// replica that holds only its own requests (serve --load-deltas snapshots)
// sends its peers what its model joined of each of its requests that
// ended, and they learn those facts as they learn their own. Joined reads
// them from an entry; Learn applies them, the clock moved to each fact's
// time first, as the state moves it before its own facts (sample.go's
// invariant). A peer's model then holds what it would have held had it
// read the decision and its outcomes: the facts are the same, and the
// model is a function of the set of facts.

// Joined is what the model joined of one decision: its path and features,
// and the targets its outcomes measured, each with its event time, in the
// model's fixed point (targetScale units a millisecond, tenths, at most
// decider.MaxLatencyFeature).
type Joined struct {
	DecidedAt int64
	Path      decider.LatencyPath
	// Inputs is the decision's feature vector without its constant.
	Inputs          [decider.LatencyK - 1]int64
	HasTTFT, HasITL bool
	TTFTAt, TTFT    int64
	ITLAt, ITL      int64
}

// Joined returns what the model holds of decision id: ok when it holds
// the decision and at least one of its targets.
func (m *Model) Joined(id string) (Joined, bool) {
	e := m.entries[id]
	if e == nil || e.flags&fDecision == 0 || e.flags&(fTTFT|fITL) == 0 {
		return Joined{}, false
	}
	j := Joined{DecidedAt: e.tD, Path: e.path}
	copy(j.Inputs[:], e.x[1:])
	if e.flags&fTTFT != 0 {
		j.HasTTFT, j.TTFTAt, j.TTFT = true, e.tT, e.ttft
	}
	if e.flags&fITL != 0 {
		j.HasITL, j.ITLAt, j.ITL = true, e.tI, e.itl
	}
	return j, true
}

// Learn applies j as the facts of decision id: its decision, then each of
// its targets, the clock moved to each fact's time before it.
func (m *Model) Learn(id string, j *Joined) {
	m.Advance(j.DecidedAt)
	in := decider.LatencyInputsOf(&j.Inputs)
	m.Decision(id, j.DecidedAt, j.Path, &in)
	if j.HasTTFT {
		m.Advance(j.TTFTAt)
		m.Outcome(id, j.TTFTAt, fromUnits(j.TTFT), -1)
	}
	if j.HasITL {
		m.Advance(j.ITLAt)
		m.Outcome(id, j.ITLAt, -1, fromUnits(j.ITL))
	}
}

// fromUnits is the milliseconds of u units, which toUnits takes back to u
// exactly for every u in [0, 2^20].
func fromUnits(u int64) float64 { return float64(u) / targetScale }
