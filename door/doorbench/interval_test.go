package doorbench

import (
	"testing"
	"time"
)

// TestDiffInterval: two samples of the same spread, one shifted by 5 ms,
// give an interval around 5 ms that excludes 0; two identical samples give
// one around 0.
func TestDiffInterval(t *testing.T) {
	a := make([]time.Duration, 2000)
	for i := range a {
		a[i] = time.Duration(10000+i*7%2000) * time.Microsecond
	}
	b := make([]time.Duration, len(a))
	for i := range b {
		b[i] = a[i] + 5*time.Millisecond
	}
	lo, hi := diffInterval(a, b, 99)
	if lo > 5*time.Millisecond || hi < 5*time.Millisecond || lo <= 0 {
		t.Fatalf("shifted by 5ms: interval [%s, %s]", lo, hi)
	}
	lo, hi = diffInterval(a, a, 99)
	if lo > 0 || hi < 0 {
		t.Fatalf("identical samples: interval [%s, %s] excludes 0", lo, hi)
	}
	if lo2, hi2 := diffInterval(a, a, 99); lo2 != lo || hi2 != hi {
		t.Fatal("the interval is not reproducible")
	}
}
