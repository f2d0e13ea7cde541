package sim

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

// TestCompareSVGIsWellFormedAndComplete: the chart parses as XML and has a
// curve per policy in both CDF panels and a bar per policy.
func TestCompareSVGIsWellFormedAndComplete(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	reps := []*Report{
		{Label: "aggregated", Goodput: 0.5, SLO: DefaultSLO(), TTFTSamples: ms(10, 20, 3000), ITLSamples: ms(20, 30, 60)},
		{Label: "cond-isl_bounding", Goodput: 0.9, SLO: DefaultSLO(), TTFTSamples: ms(5, 8, 100), ITLSamples: ms(9, 10, 12)},
	}
	var b strings.Builder
	if err := WriteCompareSVG(&b, reps, "test <&>"); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(strings.NewReader(b.String()))
	polylines, bars := 0, 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "polyline":
				polylines++
			case "rect":
				bars++
			}
		}
	}
	if polylines != 2*len(reps) {
		t.Fatalf("%d CDF curves, want %d", polylines, 2*len(reps))
	}
	if !strings.Contains(b.String(), "cond-isl_bounding") || !strings.Contains(b.String(), "90%") {
		t.Fatal("legend or goodput labels missing")
	}
}
