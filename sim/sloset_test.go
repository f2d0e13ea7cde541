package sim

import (
	"context"
	"testing"
	"time"
)

// TestGoodUnderIsTheReportsGoodput: scoring a run again under its own SLO gives the
// report's Good for every policy (one goodput definition), and a looser SLO never
// scores less than a tighter one.
func TestGoodUnderIsTheReportsGoodput(t *testing.T) {
	reps, err := Compare(context.Background(), DefaultFleet(), loadSample(t).Head(80).Scale(2), Policies(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tight := SLO{TTFT: 300 * time.Millisecond, ITL: 15 * time.Millisecond}
	some := false
	for _, r := range reps {
		if g := r.GoodUnder(r.SLO); g != r.Good || r.GoodputUnder(r.SLO) != r.Goodput {
			t.Errorf("%s: GoodUnder(own SLO) %d, report %d", r.Label, g, r.Good)
		}
		if r.GoodUnder(tight) > r.Good {
			t.Errorf("%s: a tighter SLO scores more", r.Label)
		}
		some = some || r.GoodUnder(tight) < r.Good
	}
	if !some {
		t.Fatal("the tight SLO changed no policy's goodput: the check is empty")
	}
}

// TestParseSLOSets: sets read in order, fractional milliseconds allowed, and each
// malformed list refused.
func TestParseSLOSets(t *testing.T) {
	got, err := ParseSLOSets("2000/50, 1000/30,250.5/7.5")
	want := []SLO{DefaultSLO(), {TTFT: time.Second, ITL: 30 * time.Millisecond}, {TTFT: 250500 * time.Microsecond, ITL: 7500 * time.Microsecond}}
	if err != nil || len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("%v %v", got, err)
	}
	if got[2].String() != "250.5/7.5" {
		t.Errorf("String %q", got[2].String())
	}
	for _, bad := range []string{"", "2000", "2000/", "/50", "a/b", "0/50", "2000/-1", "NaN/50", "Inf/50", "3600001/50", "2000/50/1", "2000/50,,1000/30"} {
		if _, err := ParseSLOSets(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
