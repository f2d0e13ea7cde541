package replay_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/pdrouter/pdrouter/replay"
)

// TestJSONLExportSurvivesNonFiniteFloats: a record whose floats are NaN or ±Inf
// (any producer can write them) is exported as JSON lines with those values
// null, every other column as encoding/json writes it, and the rows around it
// untouched; the export used to end at such a record.
func TestJSONLExportSurvivesNonFiniteFloats(t *testing.T) {
	recs := sloRecords(t, 3, 21)
	hostile := recs[1]
	hostile.Distance = math.NaN()
	hostile.GetSlo().LocalDelayCharge = math.Inf(1)
	hostile.GetSlo().GetFit().Mean[0] = math.Inf(-1)
	hostile.GetCandidates()[0].Cost = math.NaN()
	path := filepath.Join(t.TempDir(), "d.jsonl")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := replay.NewRowWriter[replay.DecisionRow](out, replay.FormatJSONL, "decisions")
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]replay.DecisionRow, len(recs))
	for i, r := range recs {
		rows[i] = replay.DecisionRowOf(r, replay.Position{Offset: int64(i)})
	}
	if err := w.Write(rows...); err != nil {
		t.Fatalf("export ended at a non-finite float: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	back, err := replay.ReadRows[replay.DecisionRow](path)
	if err != nil || len(back) != 3 {
		t.Fatalf("%d rows, %v", len(back), err)
	}
	same := func(a, b replay.DecisionRow) bool {
		x, _ := json.Marshal(a)
		y, _ := json.Marshal(b)
		return string(x) == string(y)
	}
	if !same(back[0], rows[0]) || !same(back[2], rows[2]) {
		t.Fatal("the rows around the hostile one changed")
	}
	h := back[1]
	if h.Distance != 0 || h.SLO.LocalDelayCharge != 0 || h.SLO.FitMean[0] != 0 || h.Candidates[0].Cost != 0 {
		t.Fatalf("non-finite values did not read back as null: %v %v %v %v", h.Distance, h.SLO.LocalDelayCharge, h.SLO.FitMean[0], h.Candidates[0].Cost)
	}
	want := rows[1]
	want.Distance, want.SLO.LocalDelayCharge, want.SLO.FitMean[0], want.Candidates[0].Cost = 0, 0, 0, 0
	if m := want.RunnerUpMargin; m != nil && math.IsNaN(*m) {
		want.RunnerUpMargin = nil // derived from the NaN cost: a null pointer reads back as none
	}
	if !same(h, want) {
		x, _ := json.Marshal(h)
		y, _ := json.Marshal(want)
		t.Fatalf("a finite column of the hostile row changed:\n%s\n%s", x, y)
	}
}
