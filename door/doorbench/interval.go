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
// percentiles of the difference of the two modes' percentile p over
// bootstrap resamples. What is resampled is the pairs of adjacent rounds
// (a direct round and the door's round after it), not single requests:
// requests of one round share the machine's load of those seconds, so
// single requests drawn at random would make the interval far too narrow
// (an A/A run showed p99 differences of 6 ms whose per-request interval
// excluded 0), and a pair shares the load of its minute across both modes.
// An interval that spans more than the bar means the run cannot tell a
// door within it from one outside it; more rounds narrow it.

// bootstrapResamples is enough for the interval's ends to settle to about
// a tenth of their width.
const bootstrapResamples = 1000

// diffInterval is the bootstrap 95% interval of pct(b, p) - pct(a, p),
// a[i] and b[i] being the TTFTs of round i of each mode. The resampling is
// seeded: the same samples give the same interval.
func diffInterval(a, b [][]time.Duration, p int) (lo, hi time.Duration) {
	k := min(len(a), len(b))
	if k == 0 {
		return 0, 0
	}
	rng := rand.New(rand.NewPCG(1, 2))
	diffs := make([]time.Duration, bootstrapResamples)
	var ra, rb []time.Duration
	for i := range diffs {
		ra, rb = ra[:0], rb[:0]
		for range k {
			r := rng.IntN(k)
			ra, rb = append(ra, a[r]...), append(rb, b[r]...)
		}
		if len(ra) == 0 || len(rb) == 0 {
			return 0, 0
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
