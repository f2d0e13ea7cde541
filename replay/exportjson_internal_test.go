package replay

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestFiniteJSONMatchesEncodingJSON: on rows encoding/json can write, the
// fallback writes the same bytes (field order, tags, escaping, null pointers
// and slices, nested rows, timestamps), so a hostile row differs from a
// normal one only in its non-finite values.
func TestFiniteJSONMatchesEncodingJSON(t *testing.T) {
	pw, margin, done := "prefill-<1>&", 0.25, Timestamp(1_780_000_000_123_456_789)
	rows := []DecisionRow{
		{},
		{
			SchemaVersion: ExportSchemaVersion, DecisionID: "d\"1\u2028", DecidedAt: done, PrefillWorker: &pw,
			EffectiveISLRatio: 1.0 / 3, Distance: -1e-300, RunnerUpMargin: &margin, FinishedAt: &done,
			Candidates: []CandidateRow{{Worker: "w", Cost: 1e21, Probability: 0.5}, {}},
			SLO:        &SLORow{Warm: true, Margin: 2.5e-7, FitSamples: []int64{1, 2}, FitCoef: []float64{}, FitMean: nil},
		},
	}
	for i, row := range rows {
		want, err := json.Marshal(row)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendFiniteJSON(nil, reflect.ValueOf(row))
		if err != nil || string(got) != string(want) {
			t.Fatalf("row %d: %v\n%s\n%s", i, err, got, want)
		}
	}
}
