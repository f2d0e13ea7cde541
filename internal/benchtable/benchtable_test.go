package benchtable

import (
	"bytes"
	"strings"
	"testing"
)

func TestPrintAndMissed(t *testing.T) {
	rows := []Row{
		{"apply rate", "600k ops/s", "≥ 500k", Verdict(true), "2M ops"},
		{"overlap query", "p99 25µs", "p99 ≤ 20µs", Verdict(false), ""},
		{"replay", "17s", "report", "", ""},
	}
	var b bytes.Buffer
	Print(&b, rows)
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "measure") {
		t.Fatalf("table:\n%s", b.String())
	}
	// Columns line up: "value" starts where every row's value starts.
	col := strings.Index(lines[0], "value")
	for i, r := range rows {
		if strings.Index(lines[i+1], r.Value) != col {
			t.Errorf("row %d: value not in the value column:\n%s", i, b.String())
		}
	}
	err := Missed(rows)
	if err == nil || err.Error() != `"overlap query" missed its bar (p99 ≤ 20µs)` {
		t.Fatalf("Missed: %v", err)
	}
	if err := Missed(rows[:1]); err != nil {
		t.Fatalf("Missed with no FAIL: %v", err)
	}
}
