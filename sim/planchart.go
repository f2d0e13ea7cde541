package sim

import (
	"fmt"
	"io"
)

// WriteSVG draws the plan: per SLO set, goodput (mean over the load levels) against
// the shape, one line per policy and aggregated serving as a dashed reference.
func (p *Plan) WriteSVG(w io.Writer) error {
	xs := make([]float64, len(p.Shapes))
	for i := range xs {
		xs[i] = float64(i)
	}
	var titles []string
	var panels [][]Series
	for si, slo := range p.SLOSets {
		ss := []Series{{Name: AggregatedLabel, Dashed: true}}
		for range p.Shapes {
			ss[0].Y = append(ss[0].Y, p.Recommendations[si].Aggregated)
		}
		for pi, name := range p.Policies {
			s := Series{Name: name}
			for _, r := range p.Rows {
				if r.SLO == slo {
					s.Y = append(s.Y, r.Goodput[pi])
				}
			}
			ss = append(ss, s)
		}
		titles = append(titles, fmt.Sprintf("Goodput, SLO %s ms", slo))
		panels = append(panels, ss)
	}
	title := fmt.Sprintf("plan: %s, %d requests, %d GPUs; recommended %s with %s", p.Workload, p.Requests, p.GPUs,
		p.Recommendations[0].Shape, p.Recommendations[0].Policy)
	return WriteLinesSVG(w, title, xs, p.Shapes, "shape (prefill P, decode D)", titles, panels)
}
