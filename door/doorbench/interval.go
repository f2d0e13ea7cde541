package doorbench

import (
	"math/rand/v2"
	"slices"
	"time"
)

// A p99 of 2000 requests is their 20th slowest, and the slowest requests
// of a run are the ones a burst of work (a GC, an engine step waking every
// stream, another process taking a core) caught: two runs of the same
// mode differ at p99 by more than the door's budget. diffInterval says how
// well a run resolves the difference it reports: the 2.5th and 97.5th
// percentiles of the difference of the two samples' percentile p over
// bootstrap resamples (each sample drawn again with replacement, at its
// size). An interval that spans more than the bar means the run cannot
// tell a door within it from one outside it; more requests narrow it.

// bootstrapResamples is enough for the interval's ends to settle to about
// a tenth of their width.
const bootstrapResamples = 1000

// diffInterval is the bootstrap 95% interval of pct(b, p) - pct(a, p). The
// resampling is seeded: the same samples give the same interval.
func diffInterval(a, b []time.Duration, p int) (lo, hi time.Duration) {
	if len(a) == 0 || len(b) == 0 {
		return 0, 0
	}
	rng := rand.New(rand.NewPCG(1, 2))
	diffs := make([]time.Duration, bootstrapResamples)
	ra, rb := make([]time.Duration, len(a)), make([]time.Duration, len(b))
	for i := range diffs {
		for j := range ra {
			ra[j] = a[rng.IntN(len(a))]
		}
		for j := range rb {
			rb[j] = b[rng.IntN(len(b))]
		}
		diffs[i] = sortedPct(rb, p) - sortedPct(ra, p)
	}
	slices.Sort(diffs)
	return diffs[len(diffs)*25/1000], diffs[min(len(diffs)-1, len(diffs)*975/1000)]
}

// sortedPct sorts d in place and returns its percentile p, as pct does.
func sortedPct(d []time.Duration, p int) time.Duration {
	slices.Sort(d)
	return d[min(len(d)-1, len(d)*p/100)]
}
