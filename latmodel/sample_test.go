package latmodel

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/internal/ulid"
)

// ulidAt is a ULID stamped at t (Unix ns) with rng's bits in place of
// crypto/rand's, so that a test's ids are the same at every run.
func ulidAt(rng *rand.Rand, t int64) string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	b := []byte(ulid.New(time.Unix(0, t)))
	for i := 10; i < ulid.Len; i++ {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

// ulidFacts is synthFacts with each request's id a ULID of its decision's
// time, as pdrouter stamps decision ids.
func ulidFacts(rng *rand.Rand, n int, span time.Duration) []fact {
	facts := synthFacts(rng, n, span, true)
	ids := map[string]string{}
	for i, f := range facts {
		if _, ok := ids[f.id]; !ok {
			if !f.decision {
				panic("synthFacts puts each request's decision first")
			}
			ids[f.id] = ulidAt(rng, f.t)
		}
		facts[i].id = ids[f.id]
	}
	return facts
}

// TestOrderIndependenceOverCapacity: with more decisions in a bucket than
// the model keeps, the facts it keeps are still a function of the set of
// facts, not of the order they arrive in: replicas past the bound agree.
func TestOrderIndependenceOverCapacity(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	cfg := Config{BucketWidth: 30 * time.Second, Buckets: 10, MaxEntries: 400}
	checkOrderIndependence(t, rng, ulidFacts(rng, 3000, 20*time.Minute), cfg, func(trial int, m *Model) {
		if s := m.Stats(); s.Entries > cfg.MaxEntries || s.Sampled == 0 {
			t.Fatalf("trial %d: stats %+v: want at most %d entries and some facts sampled out", trial, s, cfg.MaxEntries)
		}
	})
}

// TestSampleKeepsTheSmallestHashes: over capacity, a bucket keeps the ids
// of the smallest hashes among every id that had a fact in it, with all of
// their facts.
func TestSampleKeepsTheSmallestHashes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	facts := ulidFacts(rng, 600, 2*time.Minute)
	cfg := Config{BucketWidth: 30 * time.Second, Buckets: 10, MaxEntries: 100}
	m := New(cfg)
	per := m.perBucket()
	byBucket := map[int64][]string{}
	for _, f := range facts {
		m.Decision(f.id, f.t, f.path, &f.in) // no clock: nothing is late
		ms, _ := ulid.Time(f.id)
		k := m.bucketOf(ms.UnixNano())
		if !slices.Contains(byBucket[k], f.id) {
			byBucket[k] = append(byBucket[k], f.id)
		}
	}
	for k, ids := range byBucket {
		slices.SortFunc(ids, func(a, b string) int { return compareSampleKey(sampleHash(a), a, sampleHash(b), b) })
		want := ids[:min(per, len(ids))]
		for _, id := range ids {
			_, held := m.entries[id]
			if held != slices.Contains(want, id) {
				t.Fatalf("bucket %d: id %s held %v, want the %d smallest hashes of %d ids", k, id, held, per, len(ids))
			}
		}
	}
	if s := m.Stats(); s.Sampled == 0 {
		t.Fatalf("stats %+v: nothing sampled out", s)
	}
}

// TestRebuildKeepsTheSample: a model restored from its entries admits and
// refuses later facts exactly as the model that never stopped.
func TestRebuildKeepsTheSample(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	facts := ulidFacts(rng, 1500, 6*time.Minute)
	cfg := Config{BucketWidth: 30 * time.Second, Buckets: 10, MaxEntries: 200}
	half := len(facts) / 2
	m := New(cfg)
	var now int64
	for _, f := range facts[:half] {
		f.apply(m)
		now = max(now, f.t)
	}
	r := New(cfg)
	for id := range m.entries {
		v, _ := m.AppendEntry(nil, id)
		if err := r.Restore(id, v); err != nil {
			t.Fatal(err)
		}
	}
	r.Rebuilt(now)
	for _, f := range facts[half:] {
		f.apply(m)
		f.apply(r)
	}
	if !bytes.Equal(modelBytes(r), modelBytes(m)) {
		t.Fatal("the restored model kept other facts")
	}
	if m.Stats().Sampled == 0 {
		t.Fatalf("stats %+v: nothing sampled out", m.Stats())
	}
}

// TestIDTimeMustMatch: a decision whose time is not in its ULID's bucket,
// and an outcome stamped more than Skew before its decision's ULID, are
// refused and counted, so an id's facts live and leave with its bucket.
func TestIDTimeMustMatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	m := New(Config{BucketWidth: time.Second, Buckets: 5, Skew: time.Second})
	in := decider.LatencyInputs{Uncached: 10}
	id := ulidAt(rng, int64(10*time.Second))
	m.Decision(id, int64(12*time.Second), decider.PathLocal, &in)
	m.Outcome(id, int64(8*time.Second), 100, -1)
	if s := m.Stats(); s.IDTime != 2 || s.Entries != 0 {
		t.Fatalf("stats %+v: want both facts refused", s)
	}
	m.Decision(id, int64(10*time.Second)+5, decider.PathLocal, &in)
	m.Outcome(id, int64(9*time.Second)+5, 100, -1) // within Skew
	if f := m.Fit(); f == nil || f.Samples[decider.PathLocal][decider.TargetTTFT] != 1 {
		t.Fatalf("fit %+v: want the joined sample", f)
	}
}

// TestPushedOutLeavesNoEmptyBucket: an id pushed out of the sample takes its
// samples with it, and a bucket left without a sample goes too, so the sums'
// bytes are those of a model that never took the id.
func TestPushedOutLeavesNoEmptyBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	cfg := Config{BucketWidth: time.Second, Buckets: 5, MaxEntries: 6} // one id a bucket
	at := int64(10 * time.Second)
	x, y := ulidAt(rng, at), ulidAt(rng, at+1)
	if compareSampleKey(sampleHash(x), x, sampleHash(y), y) < 0 {
		x, y = y, x // y is the one kept
	}
	in := decider.LatencyInputs{Uncached: 10}
	a, b := New(cfg), New(cfg)
	for _, m := range []*Model{a, b} {
		m.Advance(at + 2)
	}
	a.Decision(x, at, decider.PathLocal, &in)
	a.Outcome(x, at+2, 100, -1)
	a.Decision(y, at+1, decider.PathLocal, &in)
	b.Decision(y, at+1, decider.PathLocal, &in)
	b.Decision(x, at, decider.PathLocal, &in)
	b.Outcome(x, at+2, 100, -1)
	if !bytes.Equal(modelBytes(a), modelBytes(b)) {
		t.Fatalf("sums differ: %x against %x", a.AppendSums(nil), b.AppendSums(nil))
	}
	if a.Fit() != nil || b.Fit() != nil {
		t.Fatal("a fit without a sample")
	}
}

// BenchmarkModelPastItsBound: a group's decisions and outcomes at 2,000 a
// second of event time, 20 minutes of them (a window of 10), into the default
// model, which keeps a sample of 794 a second, and into one bound high enough
// to keep them all: CPU per fact, and the entries each holds at the end.
//
//	go test ./latmodel -run '^$' -bench ModelPastItsBound -benchtime 1x -count 3
func BenchmarkModelPastItsBound(b *testing.B) {
	const rate, span = 2000, 20 * time.Minute
	rng := rand.New(rand.NewPCG(17, 18))
	n := int(rate * span.Seconds())
	facts := make([]fact, 0, 3*n)
	for i := range n {
		t := int64(i) * int64(time.Second) / rate
		id := ulidAt(rng, t)
		in := decider.LatencyInputs{Uncached: rng.Int64N(8000), Queued: rng.Int64N(20000), DecodeRequests: rng.Int64N(64)}
		facts = append(facts, fact{id: id, t: t, decision: true, path: decider.LatencyPath(i % 2), in: in},
			fact{id: id, t: t + int64(time.Second), ttft: 100, itl: -1},
			fact{id: id, t: t + int64(20*time.Second), ttft: -1, itl: 10})
	}
	// Facts in event time order, as a replica reads a group's log.
	slices.SortStableFunc(facts, func(x, y fact) int { return cmp.Compare(x.t, y.t) })
	for _, c := range []struct {
		name string
		max  int
	}{{"sampled", DefaultMaxEntries}, {"all", 2 * n}} {
		b.Run(c.name, func(b *testing.B) {
			var m *Model
			for range b.N {
				m = New(Config{MaxEntries: c.max})
				for i, f := range facts {
					f.apply(m)
					if i%256 == 255 {
						m.TakeDirty() // as the state does at each batch
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(facts)), "ns/fact")
			b.ReportMetric(float64(m.Stats().Entries), "entries")
		})
	}
}

// TestSampleBoundedAheadOfTheClock: facts stamped ahead of the model's clock
// (a caller that does not advance it to each fact's time, or a hostile one)
// open no sample past the clock and Skew, so the sampled entries stay within
// MaxEntries however many buckets ahead they name.
func TestSampleBoundedAheadOfTheClock(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	cfg := Config{BucketWidth: time.Second, Buckets: 5, Skew: time.Second, MaxEntries: 12}
	m := New(cfg)
	m.Advance(int64(10 * time.Second))
	in := decider.LatencyInputs{Uncached: 10}
	for i := range 1000 {
		at := int64(10*time.Second) + int64(i)*int64(time.Second)
		m.Decision(ulidAt(rng, at), at, decider.PathLocal, &in)
	}
	if s := m.Stats(); s.Entries > cfg.MaxEntries || s.IDTime == 0 {
		t.Fatalf("stats %+v: want at most %d entries, the facts ahead refused as id_time", s, cfg.MaxEntries)
	}
	// At the clock and up to Skew ahead of it, facts are taken.
	at := int64(11 * time.Second)
	m.Decision(ulidAt(rng, at), at, decider.PathLocal, &in)
	if s := m.Stats(); s.Entries < 2 {
		t.Fatalf("stats %+v: a fact within Skew of the clock was refused", s)
	}
}
