package sim

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Format prints the plan for a person: per SLO set, one row per shape (the best
// policy, its goodput, every policy's goodput), the aggregated reference, a bar per
// shape, and the recommendation. Goodput is averaged over the load levels.
func (p *Plan) Format(w io.Writer) {
	fmt.Fprintf(w, "plan: %s, %d requests, %d GPUs, load %s, %d runs\n", p.Workload, p.Requests, p.GPUs, strings.Join(LoadLabels(p.Loads), " "), len(p.Cells))
	if p.PolicySLONote != "" {
		fmt.Fprintln(w, p.PolicySLONote)
	}
	for si, slo := range p.SLOSets {
		rec := p.Recommendations[si]
		fmt.Fprintf(w, "\ngoodput %% under SLO TTFT ≤ %s ms and ITL ≤ %s ms", fmtMs(p.SLOs[si].TTFT), fmtMs(p.SLOs[si].ITL))
		if len(p.Loads) > 1 {
			fmt.Fprint(w, ", mean over the load levels")
		}
		fmt.Fprintln(w, ":")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "shape\tbest policy\tbest%%\t%s\t\n", strings.Join(p.Policies, "\t"))
		for _, r := range p.Rows {
			if r.SLO != slo {
				continue
			}
			cols := make([]string, len(r.Goodput))
			for i, g := range r.Goodput {
				cols[i] = pct(g)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", r.Shape, r.BestPolicy, pct(r.BestGoodput), strings.Join(cols, "\t"))
		}
		fmt.Fprintf(tw, "%s (%dD)\t-\t%s\t%s\t\n", AggregatedLabel, p.GPUs, pct(rec.Aggregated), strings.Repeat("\t", len(p.Policies)-1))
		_ = tw.Flush()
		fmt.Fprintln(w)
		for _, r := range p.Rows {
			if r.SLO == slo {
				fmt.Fprintf(w, "  %-12s %s %5s%% %s\n", r.Shape, bar(r.BestGoodput), pct(r.BestGoodput), r.BestPolicy)
			}
		}
		fmt.Fprintf(w, "  %-12s %s %5s%%\n", AggregatedLabel, bar(rec.Aggregated), pct(rec.Aggregated))
		fmt.Fprintf(w, "\nrecommended (SLO %s): %s with %s, goodput %s%%\n  %s\n", slo, rec.Shape, rec.Policy, pct(rec.Goodput), rec.RouterFlags)
		verdict := "does not beat it"
		switch {
		case rec.AggregatedBeats:
			verdict = "does better"
		case rec.Aggregated == rec.Goodput:
			verdict = "ties with it (and needs no KV transfer)"
		}
		fmt.Fprintf(w, "  aggregated serving (%d decode workers, KV-aware routing) %s: %s%% (%+.1f pp)\n",
			p.GPUs, verdict, pct(rec.Aggregated), 100*(rec.Aggregated-rec.Goodput))
	}
	fmt.Fprintln(w, "\nties go to fewer prefill GPUs, then to the earlier policy in the order above (the cheaper one)")
}

// barWidth is the terminal bar of 100% goodput, in characters.
const barWidth = 40

// bar draws goodput g as a bar of barWidth characters at 100%.
func bar(g float64) string {
	n := int(g*barWidth + 0.5)
	n = min(max(n, 0), barWidth)
	return strings.Repeat("█", n) + strings.Repeat("·", barWidth-n)
}

func pct(g float64) string { return strconv.FormatFloat(100*g, 'f', 1, 64) }
