package sim

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// chart geometry, in SVG user units.
const (
	chartW, chartH = 420, 260
	padL, padB     = 56, 40
	padT, padR     = 28, 16
)

// palette gives each policy a color that stays the same across panels.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// WriteCompareSVG draws `sim compare` as one SVG: the CDF of TTFT and of
// per-request mean ITL for every policy (log-scaled time axis), and goodput
// per policy as bars. It reads only the reports, so the chart is a pure
// function of the (deterministic) offline runs.
func WriteCompareSVG(w io.Writer, reps []*Report, title string) error {
	var b strings.Builder
	width := 3*chartW + 40
	height := chartH + 90 + 18*((len(reps)+2)/3)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="10" y="18" font-size="14">%s</text>`+"\n", esc(title))
	cdfPanel(&b, 0, 30, "TTFT (CDF)", reps, func(r *Report) []time.Duration { return r.TTFTSamples }, reps[0].SLO.TTFT)
	cdfPanel(&b, chartW+10, 30, "ITL, mean per request (CDF)", reps, func(r *Report) []time.Duration { return r.ITLSamples }, reps[0].SLO.ITL)
	goodputPanel(&b, 2*chartW+20, 30, reps)
	for i, r := range reps {
		x, y := 10+(i%3)*(chartW+10), chartH+60+18*(i/3)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="4" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			x, y, palette[i%len(palette)], x+18, y+5, esc(r.Label))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func cdfPanel(b *strings.Builder, x0, y0 int, title string, reps []*Report, samples func(*Report) []time.Duration, slo time.Duration) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range reps {
		for _, d := range samples(r) {
			v := math.Max(d.Seconds(), 1e-4)
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 1e-3, 1
	}
	llo, lhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if lhi <= llo {
		lhi = llo + 1
	}
	pw, ph := float64(chartW-padL-padR), float64(chartH-padT-padB)
	px := func(sec float64) float64 {
		return float64(x0+padL) + pw*(math.Log10(math.Max(sec, 1e-4))-llo)/(lhi-llo)
	}
	py := func(q float64) float64 { return float64(y0+padT) + ph*(1-q) }
	frame(b, x0, y0, title)
	for d := llo; d <= lhi; d++ {
		x := px(math.Pow(10, d))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			x, py(0), x, py(1), x, py(0)+14, esc(fmtSeconds(math.Pow(10, d))))
	}
	for _, q := range []float64{0, 0.5, 0.9, 1} {
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", x0+padL-4, py(q)+4, q)
	}
	if slo > 0 {
		x := px(slo.Seconds())
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="4 3"/><text x="%.1f" y="%.1f">SLO</text>`+"\n",
			x, py(0), x, py(1), x+3, py(1)+10)
	}
	for i, r := range reps {
		s := samples(r)
		if len(s) == 0 {
			continue
		}
		var pts strings.Builder
		n := len(s)
		step := max(1, n/400) // at most ~400 points per curve
		for j := 0; j < n; j += step {
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(s[j].Seconds()), py(float64(j+1)/float64(n)))
		}
		fmt.Fprintf(&pts, "%.1f,%.1f", px(s[n-1].Seconds()), py(1))
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", palette[i%len(palette)], pts.String())
	}
}

func goodputPanel(b *strings.Builder, x0, y0 int, reps []*Report) {
	frame(b, x0, y0, "Goodput (share of requests within SLO)")
	pw, ph := float64(chartW-padL-padR), float64(chartH-padT-padB)
	bw := pw / float64(len(reps))
	for _, q := range []float64{0, 0.5, 1} {
		y := float64(y0+padT) + ph*(1-q)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g%%</text>`+"\n",
			x0+padL, y, float64(x0+padL)+pw, y, x0+padL-4, y+4, q*100)
	}
	for i, r := range reps {
		h := ph * r.Goodput
		x := float64(x0+padL) + bw*float64(i) + bw*0.15
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/><text x="%.1f" y="%.1f" text-anchor="middle">%.0f%%</text>`+"\n",
			x, float64(y0+padT)+ph-h, bw*0.7, h, palette[i%len(palette)], x+bw*0.35, float64(y0+padT)+ph-h-3, r.Goodput*100)
	}
}

func frame(b *strings.Builder, x0, y0 int, title string) {
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="12">%s</text><rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n",
		x0+padL, y0+padT-8, esc(title), x0+padL, y0+padT, chartW-padL-padR, chartH-padT-padB)
}

func fmtSeconds(s float64) string {
	switch {
	case s < 1e-3:
		return fmt.Sprintf("%gµs", math.Round(s*1e6))
	case s < 1:
		return fmt.Sprintf("%gms", math.Round(s*1e3))
	}
	return fmt.Sprintf("%gs", s)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// Series is one line of a line chart: a name and a y value (goodput, 0..1) per x.
type Series struct {
	Name string
	Y    []float64
	// Dashed draws a reference line (aggregated serving) apart from the policies.
	Dashed bool
}

// WriteLinesSVG draws goodput against x, one line per series and one panel per
// entry of panels (each with its own series, all on the same x): the goodput-vs-load
// chart of `sim compare --chart-load` (x = load scale) and the plan's chart (x = shape).
func WriteLinesSVG(w io.Writer, title string, xs []float64, xLabels []string, xTitle string, panelTitles []string, panels [][]Series) error {
	var b strings.Builder
	cols := min(len(panels), 3)
	rows := (len(panels) + cols - 1) / cols
	nSeries := 0
	for _, s := range panels {
		nSeries = max(nSeries, len(s))
	}
	// The legend has one column per panel column; the title is wider than one panel.
	width := max(cols*(chartW+10)+30, 7*len([]rune(title))+20)
	height := rows*(chartH+10) + 60 + 18*((nSeries+cols-1)/max(cols, 1))
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="10" y="18" font-size="14">%s</text>`+"\n", esc(title))
	for i, ss := range panels {
		linePanel(&b, (i%cols)*(chartW+10), 30+(i/cols)*(chartH+10), panelTitles[i], xs, xLabels, xTitle, ss)
	}
	if len(panels) > 0 {
		for i, s := range panels[0] {
			x, y := 10+(i%cols)*(chartW+10), 30+rows*(chartH+10)+18*(i/cols)
			dash := ""
			if s.Dashed {
				dash = ` stroke-dasharray="4 3"`
			}
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d">%s</text>`+"\n",
				x, y+2, x+14, y+2, palette[i%len(palette)], dash, x+18, y+5, esc(s.Name))
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func linePanel(b *strings.Builder, x0, y0 int, title string, xs []float64, xLabels []string, xTitle string, series []Series) {
	frame(b, x0, y0, title)
	pw, ph := float64(chartW-padL-padR), float64(chartH-padT-padB)
	lo, hi := xs[0], xs[len(xs)-1]
	px := func(x float64) float64 {
		if hi == lo {
			return float64(x0+padL) + pw/2
		}
		return float64(x0+padL) + pw*(0.05+0.9*(x-lo)/(hi-lo))
	}
	py := func(g float64) float64 { return float64(y0+padT) + ph*(1-g) }
	for _, q := range []float64{0, 0.5, 1} {
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g%%</text>`+"\n",
			x0+padL, py(q), float64(x0+padL)+pw, py(q), x0+padL-4, py(q)+4, q*100)
	}
	for i, x := range xs {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(x), py(0)+14, esc(xLabels[i]))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px((lo+hi)/2), py(0)+30, esc(xTitle))
	for i, s := range series {
		var pts strings.Builder
		for j, g := range s.Y {
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(xs[j]), py(g))
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="4 3"`
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>`+"\n", palette[i%len(palette)], dash, strings.TrimSpace(pts.String()))
		for j, g := range s.Y {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", px(xs[j]), py(g), palette[i%len(palette)])
		}
	}
}
