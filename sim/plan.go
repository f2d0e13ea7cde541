package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"
)

// MaxPlanGPUs bounds the GPU count of a plan: every split is a shape, and every shape
// runs every policy.
const MaxPlanGPUs = 64

// MaxLoadScales bounds the load levels of one sweep: each multiplies the runs.
const MaxLoadScales = 16

// PlanConfig is a fleet-planning sweep: every shape of one GPU count under every
// policy, at every load level, scored under every SLO set.
type PlanConfig struct {
	// Fleet gives the hardware, engine settings and seed; its Prefill and Decode are
	// replaced by each shape's, its SLO by SLOs[0].
	Fleet FleetConfig
	// GPUs is the fleet's size; Shapes (default AllShapes(GPUs)) must all have it.
	GPUs   int
	Shapes []Shape
	// Policies are the disaggregated setups swept (default DisaggPolicies()).
	// Aggregated serving always runs once per load level as the reference.
	Policies []Policy
	// Loads are arrival-rate multipliers (default [1]); SLOs the sets goodput is
	// scored under (default [DefaultSLO()]); the first set is the runs' own SLO.
	Loads []float64
	SLOs  []SLO
	// PolicySLO is the SLO that the policies reading one (cond-slo) decide with
	// (default SLOs[0], the runs' own), so that a plan scored at the user's SLO
	// runs the policy aimed at it.
	PolicySLO SLO
	// Parallel is how many runs go at once (default GOMAXPROCS). Results do not
	// depend on it: each run is a pure function of its cell, and results are kept
	// in cell order, never in completion order.
	Parallel int
	// Log receives progress lines (cells done of total, elapsed); nil: none.
	Log *slog.Logger
	// ProgressEvery is the interval of progress lines while runs are going
	// (default 30 s), on top of one line per finished run.
	ProgressEvery time.Duration
}

// AllShapes is every split of gpus into x prefill and y decode workers, x, y ≥ 1,
// fewest prefill workers first.
func AllShapes(gpus int) []Shape {
	var out []Shape
	for x := 1; x < gpus; x++ {
		out = append(out, Shape{Prefill: x, Decode: gpus - x})
	}
	return out
}

// DisaggPolicies is Policies without aggregated serving: the setups a shape's
// prefill/decode split is chosen for, in the order of Policies, which is also the
// plan's tie order (always-local, the cheapest, first).
func DisaggPolicies() []Policy {
	var out []Policy
	for _, p := range Policies() {
		if !p.Aggregated {
			out = append(out, p)
		}
	}
	return out
}

// AggregatedLabel names the aggregated reference in a plan's cells.
const AggregatedLabel = "aggregated"

func (c *PlanConfig) fill() error {
	if c.GPUs < 2 || c.GPUs > MaxPlanGPUs {
		return fmt.Errorf("--gpus %d: a split fleet needs 2 to %d GPUs", c.GPUs, MaxPlanGPUs)
	}
	if len(c.Shapes) == 0 {
		c.Shapes = AllShapes(c.GPUs)
	}
	// Shapes and policies are put in their canonical order (fewest prefill GPUs first;
	// the order of Policies), which is also the tie order, so that the output does not
	// depend on the order they were given in.
	c.Shapes = slices.Clone(c.Shapes)
	slices.SortFunc(c.Shapes, func(a, b Shape) int { return a.Prefill - b.Prefill })
	for i, s := range c.Shapes {
		if s.Prefill < 1 || s.Decode < 1 || s.Prefill+s.Decode != c.GPUs {
			return fmt.Errorf("--shapes: %s is not a split of %d GPUs with ≥ 1 prefill and ≥ 1 decode worker", s, c.GPUs)
		}
		if i > 0 && c.Shapes[i-1] == s {
			return fmt.Errorf("--shapes: %s appears twice", s)
		}
	}
	if len(c.Policies) == 0 {
		c.Policies = DisaggPolicies()
	}
	order := PolicyNames()
	c.Policies = slices.Clone(c.Policies)
	slices.SortFunc(c.Policies, func(a, b Policy) int { return slices.Index(order, a.Name) - slices.Index(order, b.Name) })
	for i, p := range c.Policies {
		if p.Aggregated {
			return fmt.Errorf("--policies: %s is the plan's reference row, not a policy to sweep", p.Name)
		}
		if i > 0 && c.Policies[i-1].Name == p.Name {
			return fmt.Errorf("--policies: %s appears twice", p.Name)
		}
	}
	if len(c.Loads) == 0 {
		c.Loads = []float64{1}
	}
	loads, err := CheckLoadScales(c.Loads)
	if err != nil {
		return err
	}
	c.Loads = loads
	if len(c.SLOs) == 0 {
		c.SLOs = []SLO{DefaultSLO()}
	}
	if c.PolicySLO == (SLO{}) {
		c.PolicySLO = c.SLOs[0]
	}
	c.Policies = PoliciesDecidingAt(c.Policies, c.PolicySLO)
	if c.Parallel <= 0 {
		c.Parallel = runtime.GOMAXPROCS(0)
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = 30 * time.Second
	}
	return nil
}

// planJob is one run of a plan: a policy on a shape at a load level.
type planJob struct {
	load   int
	shape  Shape
	policy Policy
}

// PlanCell is one run's result.
type PlanCell struct {
	Load   float64 `json:"load_scale"`
	Shape  string  `json:"shape"`
	Policy string  `json:"policy"`
	// Good and Goodput are per SLO set, in the order of the plan's SLOs.
	Good       []int     `json:"good"`
	Goodput    []float64 `json:"goodput"`
	LocalShare float64   `json:"local_share"`
	// Report is the run's whole report (the same as `sim compare`'s for the cell).
	Report *Report `json:"-"`
}

// RunPlan runs every cell of the plan and ranks the results. The workload is
// scaled once per load level and shared, read-only, by the runs.
func RunPlan(ctx context.Context, c PlanConfig, w *Workload) (*Plan, error) {
	if err := c.fill(); err != nil {
		return nil, err
	}
	if len(w.Requests) == 0 {
		return nil, errors.New("plan: the workload has no requests")
	}
	loads := make([]*Workload, len(c.Loads))
	for i, x := range c.Loads {
		loads[i] = w.Scale(x)
	}
	var jobs []planJob
	agg := Policies()[0]
	for li := range c.Loads {
		jobs = append(jobs, planJob{load: li, shape: Shape{Prefill: 0, Decode: c.GPUs}, policy: agg})
		for _, s := range c.Shapes {
			for _, p := range c.Policies {
				jobs = append(jobs, planJob{load: li, shape: s, policy: p})
			}
		}
	}
	reps, err := runJobs(ctx, c, loads, jobs)
	if err != nil {
		return nil, err
	}
	p := &Plan{Workload: w.Name, Requests: len(w.Requests), GPUs: c.GPUs, Loads: c.Loads, SLOs: c.SLOs,
		PolicySLONote: PolicySLONote(c.Policies)}
	for _, s := range c.Shapes {
		p.Shapes = append(p.Shapes, s.String())
	}
	for _, pol := range c.Policies {
		p.Policies = append(p.Policies, pol.Name)
	}
	for i, j := range jobs {
		cell := PlanCell{Load: c.Loads[j.load], Shape: j.shape.String(), Policy: j.policy.Name, Report: reps[i],
			LocalShare: reps[i].LocalShare()}
		if j.policy.Aggregated {
			cell.Shape = AggregatedLabel
		}
		for _, s := range c.SLOs {
			g := reps[i].GoodUnder(s)
			cell.Good = append(cell.Good, g)
			cell.Goodput = append(cell.Goodput, float64(g)/float64(reps[i].Requests))
		}
		p.Cells = append(p.Cells, cell)
	}
	p.rank(c)
	return p, nil
}

// runJobs runs the jobs, up to c.Parallel at once, and returns their reports in job
// order. The first error (in job order) cancels the rest.
func runJobs(ctx context.Context, c PlanConfig, loads []*Workload, jobs []planJob) ([]*Report, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reps := make([]*Report, len(jobs))
	var (
		mu       sync.Mutex
		firstErr error // the failure that cancelled the others, not their ctx errors
	)
	next := make(chan int)
	done := make(chan int)
	var wg sync.WaitGroup
	for range min(c.Parallel, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				j := jobs[i]
				fc := c.Fleet
				fc.Prefill, fc.Decode, fc.SLO = j.shape.Prefill, j.shape.Decode, c.SLOs[0]
				var err error
				reps[i], err = RunOffline(ctx, fc, loads[j.load], j.policy, nil)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("plan: %s on %s at load ×%g: %w", j.policy.Name, j.shape, c.Loads[j.load], err)
					}
					mu.Unlock()
					cancel()
				}
				done <- i
			}
		}()
	}
	go func() {
		defer close(next)
		for i := range jobs {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(done) }()
	start := time.Now()
	tick := time.NewTicker(c.ProgressEvery)
	defer tick.Stop()
	finished := 0
	for open := true; open; {
		select {
		case i, ok := <-done:
			if !ok {
				open = false
				break
			}
			finished++
			if c.Log != nil {
				j := jobs[i]
				shape := j.shape.String()
				if j.policy.Aggregated {
					shape = AggregatedLabel
				}
				c.Log.Info("plan progress", "done", finished, "total", len(jobs), "elapsed", time.Since(start).Round(time.Second),
					"shape", shape, "policy", j.policy.Name, "load_scale", c.Loads[j.load])
			}
		case <-tick.C:
			if c.Log != nil {
				c.Log.Info("plan progress", "done", finished, "total", len(jobs), "elapsed", time.Since(start).Round(time.Second))
			}
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return reps, nil
}
