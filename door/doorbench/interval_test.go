package doorbench

import (
	"testing"
	"time"
)

// rounds splits d into n rounds.
func rounds(d []time.Duration, n int) [][]time.Duration {
	out := make([][]time.Duration, n)
	for i, x := range d {
		out[i%n] = append(out[i%n], x)
	}
	return out
}

// TestDiffInterval: two samples of the same spread, one shifted by 5 ms,
// give an interval around 5 ms that excludes 0; two identical samples give
// one around 0; rounds that differ from each other (load that changed
// between them) widen it.
func TestDiffInterval(t *testing.T) {
	a := make([]time.Duration, 2000)
	for i := range a {
		a[i] = time.Duration(10000+i*7%2000) * time.Microsecond
	}
	b := make([]time.Duration, len(a))
	for i := range b {
		b[i] = a[i] + 5*time.Millisecond
	}
	lo, hi := diffInterval(rounds(a, 8), rounds(b, 8), 99)
	if lo > 5*time.Millisecond || hi < 5*time.Millisecond || lo <= 0 {
		t.Fatalf("shifted by 5ms: interval [%s, %s]", lo, hi)
	}
	lo, hi = diffInterval(rounds(a, 8), rounds(a, 8), 99)
	if lo > 0 || hi < 0 {
		t.Fatalf("identical samples: interval [%s, %s] excludes 0", lo, hi)
	}
	if lo2, hi2 := diffInterval(rounds(a, 8), rounds(a, 8), 99); lo2 != lo || hi2 != hi {
		t.Fatal("the interval is not reproducible")
	}
	// Rounds of the door whose load differed (a core taken in some of
	// them) make the interval wider than rounds that did not.
	rb := rounds(b, 8)
	for i := range rb {
		for j := range rb[i] {
			rb[i][j] += time.Duration(i%3) * 3 * time.Millisecond
		}
	}
	lo0, hi0 := diffInterval(rounds(a, 8), rounds(b, 8), 99)
	lo1, hi1 := diffInterval(rounds(a, 8), rb, 99)
	if hi1-lo1 <= hi0-lo0 {
		t.Fatalf("rounds of different loads: interval [%s, %s], no wider than [%s, %s]", lo1, hi1, lo0, hi0)
	}
}
