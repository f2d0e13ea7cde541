package sim

import (
	"strings"
	"testing"
	"time"
)

func TestParseShapes(t *testing.T) {
	got, err := ParseShapes("2P6D, 3p5d,6P2D")
	if err != nil || len(got) != 3 || got[0] != (Shape{2, 6}) || got[1] != (Shape{3, 5}) || got[2].String() != "6P2D" {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "2P", "P6D", "2P0D", "-1P9D", "2P6D,3P6D", "xPyD", "2P6Dx"} {
		if _, err := ParseShapes(bad); err == nil || !strings.Contains(err.Error(), "--shapes") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := ParseShapes(strings.Repeat("1P1D,", MaxShapes) + "1P1D"); err == nil {
		t.Error("more than MaxShapes accepted")
	}
}

// TestWorkloadScale: a load scale divides arrival times and leaves requests alone.
func TestWorkloadScale(t *testing.T) {
	w := &Workload{Name: "w", Requests: []*Request{{ID: "a", Arrival: 3 * time.Second, PromptLen: 7}}}
	s := w.Scale(1.5)
	if s.Requests[0].Arrival != 2*time.Second || s.Requests[0].PromptLen != 7 || w.Requests[0].Arrival != 3*time.Second {
		t.Fatalf("scaled %+v, original %+v", s.Requests[0], w.Requests[0])
	}
	if w.Scale(1) != w {
		t.Fatal("scale 1 copied the workload")
	}
}
