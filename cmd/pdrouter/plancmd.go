package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pdrouter/pdrouter/sim"
)

// maxPlanParallel bounds --parallel: runs are CPU-bound, so more than the machine's
// cores only costs memory.
const maxPlanParallel = 256

// planWorkloadFlags are the flags of simFlags that `plan` takes: the trace and its
// cut, the seed, the load levels and the SLO sets. They are bound by simFlags.bind
// (into a scratch set, then moved onto the command), so that their names, defaults
// and meaning are those of `sim compare`.
var planWorkloadFlags = []string{"trace", "seed", "max-requests", "max-duration", "load-scale", "slo-ttft", "slo-itl", "slo", "policy-slo"}

// newPlanCmd is `pdrouter plan`: the fleet planner.
func newPlanCmd(a *app) *cobra.Command {
	var (
		sf       simFlags
		gpus     int
		shapes   string
		policies string
		parallel int
		out      string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Recommend a prefill/decode split and policy for a GPU count from a trace",
		Long: `plan replays a Mooncake JSONL trace (yours: ` + "`pdrouter export trace`" + ` turns a window
of the decision log into one) in the offline simulator on every split of --gpus GPUs
into x prefill and y decode workers (x, y ≥ 1, or --shapes), under every policy of
` + "`sim compare`" + ` (or --policies), at every --load-scale level, and scores goodput under
every SLO set; cond-slo decides with the first set (or --policy-slo). Aggregated
serving (every GPU a decode worker, KV-aware routing) runs as the reference.

It prints, per SLO set, one row per shape (its best policy and every policy's
goodput, averaged over the load levels) and recommends the shape and policy with the
best goodput, with the router flags that run it, and says whether aggregated serving
beats it. Ties go to fewer prefill GPUs, then to the earlier policy in the table's
order (the cheaper one). Each cell is the run ` + "`sim compare`" + ` makes for the same shape,
load and SLO, with the same numbers. Runs go --parallel at a time; the output does
not depend on it. --out writes plan.txt (the table and every cell's ` + "`sim compare`" + `
table), plan.json and plan.svg (goodput per shape, one line per policy).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, w, err := planConfig(&sf, gpus, shapes, policies, parallel)
			if err != nil {
				return err
			}
			c.Log = a.log
			start := time.Now()
			a.log.Info("plan", "trace", sf.trace, "requests", len(w.Requests), "gpus", gpus, "parallel", c.Parallel)
			p, err := sim.RunPlan(cmd.Context(), c, w)
			if err != nil {
				return err
			}
			a.log.Info("plan done", "runs", len(p.Cells), "took", time.Since(start).Round(time.Second))
			if asJSON {
				if err := writePlanJSON(a.stdout, p); err != nil {
					return err
				}
			} else {
				p.Format(a.stdout)
			}
			if out == "" {
				return nil
			}
			return writePlanFiles(a, out, p)
		},
	}
	scratch := pflag.NewFlagSet("plan", pflag.ContinueOnError)
	sf.sweep = true
	sf.bind(scratch, "")
	for _, name := range planWorkloadFlags {
		cmd.Flags().AddFlag(scratch.Lookup(name))
	}
	fl := cmd.Flags()
	fl.IntVar(&gpus, "gpus", 8, fmt.Sprintf("GPUs of the fleet to split into prefill and decode workers (2 to %d)", sim.MaxPlanGPUs))
	fl.StringVar(&shapes, "shapes", "", "shapes to sweep, like 2P6D,3P5D (each with --gpus GPUs, ≥ 1 prefill); default: every split")
	fl.StringVar(&policies, "policies", "", "policies to sweep, comma-separated, of: "+strings.Join(planPolicyNames(), ", ")+"; default: all")
	fl.IntVar(&parallel, "parallel", 0, fmt.Sprintf("runs at once (1 to %d; 0: GOMAXPROCS)", maxPlanParallel))
	fl.StringVar(&out, "out", "", "directory to write plan.txt, plan.json and plan.svg into")
	fl.BoolVar(&asJSON, "json", false, "print the plan as JSON instead of the table")
	return cmd
}

func planPolicyNames() []string {
	var out []string
	for _, p := range sim.DisaggPolicies() {
		out = append(out, p.Name)
	}
	return out
}

// planConfig checks the flags and loads the trace.
func planConfig(sf *simFlags, gpus int, shapes, policies string, parallel int) (sim.PlanConfig, *sim.Workload, error) {
	var c sim.PlanConfig
	if sf.trace == "" {
		return c, nil, errors.New("--trace: plan needs a Mooncake JSONL trace (pdrouter export trace writes one from the decision log)")
	}
	if gpus < 2 || gpus > sim.MaxPlanGPUs {
		return c, nil, fmt.Errorf("--gpus %d: a split fleet needs 2 to %d GPUs", gpus, sim.MaxPlanGPUs)
	}
	if parallel < 0 || parallel > maxPlanParallel {
		return c, nil, fmt.Errorf("--parallel %d: want 0 (GOMAXPROCS) to %d", parallel, maxPlanParallel)
	}
	slos, err := sf.sloSets()
	if err != nil {
		return c, nil, err
	}
	loads, err := sim.CheckLoadScales(sf.loadScales)
	if err != nil {
		return c, nil, err
	}
	policySLO, err := sf.policySLOOr(slos[0])
	if err != nil {
		return c, nil, err
	}
	c = sim.PlanConfig{Fleet: sim.DefaultFleet(), GPUs: gpus, Loads: loads, SLOs: slos, PolicySLO: policySLO, Parallel: parallel}
	c.Fleet.Seed = sf.seed
	if shapes != "" {
		if c.Shapes, err = sim.ParseShapes(shapes); err != nil {
			return c, nil, err
		}
	}
	if policies != "" {
		names := strings.Split(policies, ",")
		if len(names) > len(sim.Policies()) {
			return c, nil, fmt.Errorf("--policies: %d names; there are %d policies", len(names), len(sim.Policies()))
		}
		for _, n := range names {
			p, err := sim.PolicyByName(strings.TrimSpace(n))
			if err != nil {
				return c, nil, fmt.Errorf("--policies: %w", err)
			}
			c.Policies = append(c.Policies, p)
		}
	}
	w, err := sf.unscaled()
	if err != nil {
		return c, nil, err
	}
	return c, w, nil
}

func writePlanJSON(w io.Writer, p *sim.Plan) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// writePlanFiles writes plan.txt (the table, then each cell's `sim compare` table by
// load and shape), plan.json and plan.svg into dir.
func writePlanFiles(a *app, dir string, p *sim.Plan) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	txt := func(w io.Writer) error {
		p.Format(w)
		for _, x := range p.Loads {
			for _, sh := range append([]string{sim.AggregatedLabel}, p.Shapes...) {
				var reps []*sim.Report
				for _, c := range p.Cells {
					if c.Load == x && c.Shape == sh {
						reps = append(reps, c.Report)
					}
				}
				fmt.Fprintf(w, "\n%s, load ×%g, SLO %s:\n", sh, x, p.SLOSets[0])
				sim.FormatTable(w, reps)
			}
		}
		return nil
	}
	files := []struct {
		name  string
		write func(io.Writer) error
	}{
		{"plan.txt", txt},
		{"plan.json", func(w io.Writer) error { return writePlanJSON(w, p) }},
		{"plan.svg", p.WriteSVG},
	}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if err := writeAtomically(path, a.stdout, f.write); err != nil {
			return err
		}
		a.log.Info("plan wrote", "file", path)
	}
	return nil
}
