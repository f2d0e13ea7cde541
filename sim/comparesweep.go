package sim

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
)

// CheckLoadScales validates a list of load levels: 1 to MaxLoadScales of them, each
// in (0, 100], none twice. It returns them in ascending order, the order of a sweep's
// columns and of its chart's x axis.
func CheckLoadScales(xs []float64) ([]float64, error) {
	if len(xs) == 0 || len(xs) > MaxLoadScales {
		return nil, fmt.Errorf("--load-scale: %d levels; want 1 to %d", len(xs), MaxLoadScales)
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	for i, x := range xs {
		if !(x > 0 && x <= 100) {
			return nil, fmt.Errorf("--load-scale %v: must be in (0, 100]", x)
		}
		if i > 0 && xs[i-1] == x {
			return nil, fmt.Errorf("--load-scale %v appears twice", x)
		}
	}
	return xs, nil
}

// FormatSLOSets prints each policy's goodput under every SLO set, from the same runs.
func FormatSLOSets(w io.Writer, reps []*Report, slos []SLO) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "goodput% under SLO (TTFT ms/ITL ms)")
	for _, s := range slos {
		fmt.Fprintf(tw, "\t%s", s)
	}
	fmt.Fprintln(tw, "\t")
	for _, r := range reps {
		fmt.Fprint(tw, r.Label)
		for _, s := range slos {
			fmt.Fprintf(tw, "\t%s", pct(r.GoodputUnder(s)))
		}
		fmt.Fprintln(tw, "\t")
	}
	_ = tw.Flush()
}

// FormatLoadSweep prints each policy's goodput (rows) at every load level (columns)
// under one SLO; reps[i] are the reports of loads[i], in the same policy order.
func FormatLoadSweep(w io.Writer, loads []float64, reps [][]*Report, slo SLO) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "goodput%% (SLO %s) at load", slo)
	for _, x := range loads {
		fmt.Fprintf(tw, "\t×%s", strconv.FormatFloat(x, 'g', -1, 64))
	}
	fmt.Fprintln(tw, "\t")
	for _, s := range LoadSeries(reps, slo) {
		fmt.Fprint(tw, s.Name)
		for _, g := range s.Y {
			fmt.Fprintf(tw, "\t%s", pct(g))
		}
		fmt.Fprintln(tw, "\t")
	}
	_ = tw.Flush()
}

// LoadSeries is one series per policy: its goodput under slo at each load level.
func LoadSeries(reps [][]*Report, slo SLO) []Series {
	if len(reps) == 0 {
		return nil
	}
	out := make([]Series, len(reps[0]))
	for pi, r := range reps[0] {
		out[pi].Name = r.Label
		for li := range reps {
			out[pi].Y = append(out[pi].Y, reps[li][pi].GoodputUnder(slo))
		}
	}
	return out
}

// LoadLabels are the x labels of a load sweep: ×0.5, ×1, …
func LoadLabels(loads []float64) []string {
	out := make([]string, len(loads))
	for i, x := range loads {
		out[i] = "×" + strconv.FormatFloat(x, 'g', -1, 64)
	}
	return out
}
