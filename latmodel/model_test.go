package latmodel

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/decider"
)

// fact is one decision or outcome, for applying in different orders.
type fact struct {
	id        string
	t         int64
	decision  bool
	path      decider.LatencyPath
	in        decider.LatencyInputs
	ttft, itl float64
}

func (f fact) apply(m *Model) {
	m.Advance(f.t)
	if f.decision {
		m.Decision(f.id, f.t, f.path, &f.in)
	} else {
		m.Outcome(f.id, f.t, f.ttft, f.itl)
	}
}

// synthFacts draws n requests whose latencies follow a known linear law plus noise
// (with replace, some get a second, later TTFT 50 ms higher):
// TTFT = 50 + 0.5·uncached + 0.25·queued ms, ITL = 8 + 0.1·decode requests ms, with
// outcomes some seconds after their decisions, a few stamped before them (skew), some
// missing and some duplicated.
func synthFacts(rng *rand.Rand, n int, span time.Duration, replace bool) []fact {
	var out []fact
	for i := range n {
		id := fmt.Sprintf("d%05d", i)
		t := int64(rng.Int64N(int64(span)))
		path := decider.LatencyPath(rng.IntN(2))
		in := decider.LatencyInputs{Uncached: rng.Int64N(8000), Queued: rng.Int64N(20000), DecodeRequests: rng.Int64N(64),
			DecodeBlocks: rng.Int64N(5000)}
		ttft := 50 + 0.5*float64(in.Uncached) + 0.25*float64(in.Queued) + rng.NormFloat64()*5
		itl := 8 + 0.1*float64(in.DecodeRequests) + rng.NormFloat64()*0.5
		out = append(out, fact{id: id, t: t, decision: true, path: path, in: in})
		if rng.IntN(10) != 0 {
			tp := t + int64(ttft*float64(time.Millisecond)) - int64(rng.IntN(3))*int64(time.Second)
			out = append(out, fact{id: id, t: tp, ttft: ttft, itl: -1})
			tc := tp + int64(20*time.Second)
			out = append(out, fact{id: id, t: tc, ttft: -1, itl: itl})
			if rng.IntN(8) == 0 {
				out = append(out, fact{id: id, t: tc, ttft: -1, itl: itl}) // a duplicate
			}
			if replace && rng.IntN(8) == 0 {
				// Another measurement of the same kind: the later one is kept.
				out = append(out, fact{id: id, t: tp + int64(time.Second), ttft: ttft + 50, itl: -1})
			}
		}
		if rng.IntN(20) == 0 {
			out = append(out, fact{id: id, t: t, decision: true, path: path, in: in}) // a duplicate
		}
	}
	return out
}

func modelBytes(m *Model) []byte {
	b := m.AppendSums(nil)
	ids := make([]string, 0, len(m.entries))
	for id := range m.entries {
		ids = append(ids, id)
	}
	for _, id := range sortedStrings(ids) {
		b = append(b, id...)
		b, _ = m.AppendEntry(b, id)
	}
	return b
}

// TestOrderIndependence: the same set of facts applied in different interleavings, as
// two replicas read two topics, gives byte-identical sums and entries and the same fit.
func TestOrderIndependence(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	checkOrderIndependence(t, rng, synthFacts(rng, 3000, 20*time.Minute, true), Config{BucketWidth: 30 * time.Second, Buckets: 10}, nil)
}

// checkOrderIndependence applies facts in their order, then in five random ones, to
// models of cfg: every model has the same bytes and fit, with samples; check, if
// any, looks at each model too.
func checkOrderIndependence(t *testing.T, rng *rand.Rand, facts []fact, cfg Config, check func(trial int, m *Model)) {
	t.Helper()
	var ref []byte
	var refFit *decider.LatencyFit
	for trial := range 6 {
		order := rng.Perm(len(facts))
		if trial == 0 {
			// As generated: decisions before their outcomes.
			order = order[:0]
			for i := range facts {
				order = append(order, i)
			}
		}
		m := New(cfg)
		for _, i := range order {
			facts[i].apply(m)
		}
		if check != nil {
			check(trial, m)
		}
		b := modelBytes(m)
		fit := m.Fit()
		if trial == 0 {
			ref, refFit = b, fit
			if fit == nil || fit.Samples[0][0] == 0 {
				t.Fatalf("no samples: %+v", m.Stats())
			}
			t.Logf("stats %+v samples %v", m.Stats(), fit.Samples)
			continue
		}
		if !bytes.Equal(b, ref) {
			t.Fatalf("trial %d: model bytes differ (%d vs %d bytes)", trial, len(b), len(ref))
		}
		if *fit != *refFit {
			t.Fatalf("trial %d: fits differ", trial)
		}
	}
}

// TestFitRecoversTheLaw: with enough samples the fit predicts the law within the
// noise.
func TestFitRecoversTheLaw(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	m := New(Config{BucketWidth: time.Minute, Buckets: 60})
	for _, f := range synthFacts(rng, 4000, 30*time.Minute, false) {
		f.apply(m)
	}
	fit := m.Fit()
	in := decider.LatencyInputs{Uncached: 3000, Queued: 10000, DecodeRequests: 30}
	for p := range decider.LatencyPath(2) {
		got := fit.Predict(p, decider.TargetTTFT, &in)
		if want := 50 + 0.5*3000 + 0.25*10000.0; math.Abs(got-want) > 10 {
			t.Errorf("path %d: TTFT %.1f, want %.1f", p, got, want)
		}
		got = fit.Predict(p, decider.TargetITL, &in)
		if want := 8 + 0.1*30.0; math.Abs(got-want) > 0.3 {
			t.Errorf("path %d: ITL %.2f, want %.2f", p, got, want)
		}
		if s := fit.Sigma[p][decider.TargetTTFT]; s < 4 || s > 6 {
			t.Errorf("path %d: TTFT sigma %.2f, want about 5", p, s)
		}
	}
}

// TestWindowForgets: facts whose bucket left the window leave the sums and the
// entries, and a fact arriving after its bucket left is ignored and counted.
func TestWindowForgets(t *testing.T) {
	m := New(Config{BucketWidth: time.Second, Buckets: 3, Skew: time.Nanosecond})
	in := decider.LatencyInputs{Uncached: 10}
	m.Advance(0)
	m.Decision("a", 0, decider.PathLocal, &in)
	m.Outcome("a", int64(100*time.Millisecond), 100, -1)
	if f := m.Fit(); f == nil || f.Samples[0][0] != 1 {
		t.Fatalf("fit %+v", f)
	}
	m.Advance(int64(3 * time.Second)) // bucket 0 leaves (window 1..3)
	if f := m.Fit(); f != nil {
		t.Fatalf("fit after the window moved: %+v", f)
	}
	if s := m.Stats(); s.Entries != 0 || s.Expired != 1 {
		t.Fatalf("stats %+v", s)
	}
	m.Decision("b", 0, decider.PathLocal, &in)
	if s := m.Stats(); s.Late != 1 || s.Entries != 0 {
		t.Fatalf("late decision: stats %+v", s)
	}
}

// TestRebuildGivesTheSameModel: a model restored from its entries' bytes (a store
// reopened) has the same sums and fit.
func TestRebuildGivesTheSameModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	m := New(Config{})
	var now int64
	for _, f := range synthFacts(rng, 500, 5*time.Minute, true) {
		f.apply(m)
		now = max(now, f.t)
	}
	r := New(Config{})
	for id := range m.entries {
		v, _ := m.AppendEntry(nil, id)
		if err := r.Restore(id, v); err != nil {
			t.Fatal(err)
		}
	}
	r.Rebuilt(now)
	if !bytes.Equal(modelBytes(r), modelBytes(m)) {
		t.Fatal("rebuilt model differs")
	}
	if *r.Fit() != *m.Fit() {
		t.Fatal("rebuilt fit differs")
	}
}

// TestOutcomeWithoutDecisionIDIsCounted: the join needs a decision id.
func TestOutcomeWithoutDecisionIDIsCounted(t *testing.T) {
	m := New(Config{})
	m.Outcome("", 1, 100, 10)
	if m.Stats().NoDecision != 1 || len(m.entries) != 0 {
		t.Fatalf("stats %+v", m.Stats())
	}
}

// TestMaxEntriesBoundsTheJoin: beyond MaxEntries facts are dropped and counted.
func TestMaxEntriesBoundsTheJoin(t *testing.T) {
	m := New(Config{MaxEntries: 2})
	in := decider.LatencyInputs{}
	for i := range 5 {
		m.Decision(fmt.Sprint(i), 1, decider.PathRemote, &in)
	}
	if s := m.Stats(); s.Entries != 2 || s.Full != 3 {
		t.Fatalf("stats %+v", s)
	}
}
