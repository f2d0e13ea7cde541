// Package benchtable is the table the `pdrouter bench` commands print: one
// row per measure, its value, the bar it is held to and the verdict. One
// shape for every bench, so results can be read (and grepped) alike.
package benchtable

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Row is one measure.
type Row struct {
	Measure string
	Value   string
	Bar     string
	Verdict string // "ok", "FAIL", "" (report only)
	Detail  string
}

// Verdict is "ok" or "FAIL".
func Verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAIL"
}

// Print writes rows as aligned columns under a header.
func Print(out io.Writer, rows []Row) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "measure\tvalue\tbar\tverdict\tdetail")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.Measure, r.Value, r.Bar, r.Verdict, r.Detail)
	}
	_ = w.Flush()
}

// Missed returns an error naming the first row that failed its bar, so a
// bench command exits non-zero when a bar is missed; nil when none did.
func Missed(rows []Row) error {
	for _, r := range rows {
		if r.Verdict == "FAIL" {
			return fmt.Errorf("%q missed its bar (%s)", r.Measure, r.Bar)
		}
	}
	return nil
}

// NewRow is a Row from its five cells, in column order.
func NewRow(measure, value, bar, verdict, detail string) Row {
	return Row{Measure: measure, Value: value, Bar: bar, Verdict: verdict, Detail: detail}
}
