package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/sim"
)

// simFlags are the flags that shape a simulated fleet and its workload. They are bound
// with a prefix so that `pdrouter dev` can offer the same ones as --sim-… next to its
// own flags.
type simFlags struct {
	prefill, decode int
	trace           string
	rate, agentic   float64
	duration        time.Duration
	seed            uint64
	timeScale       float64
	sloTTFT, sloITL time.Duration
	maxRequests     int
	maxDuration     time.Duration
	wire            string
	httpMaxBody     int64
	kvHold          time.Duration
	loadScale       float64
	arrivalSpread   time.Duration
	cpuKVGiB        float64
	cpuKVGBps       float64
	// sweep binds --load-scale as a list (loadScales) and adds --slo: the flags of
	// `sim compare` and `plan`, which run a workload at several load levels and
	// score it under several SLO sets.
	sweep      bool
	loadScales []float64
	slo        string
	// policySLO is --policy-slo: the SLO that the policies reading one (cond-slo)
	// decide with in offline runs; empty: the runs' own SLO.
	policySLO string
	// replicas and replicaLag are --replicas and --replica-lag: offline runs as
	// router replicas that see each other's load late.
	replicas   int
	replicaLag time.Duration
	// replicaHashes is --replica-hashes: how many leading hashes of a peer's
	// chain a replica sees.
	replicaHashes int
	// replicaShares is --replica-shares: peers' load as the rows of their
	// snapshots (serve --load-deltas snapshots).
	replicaShares bool
	// replicaModels is --replica-models: a latency model per replica.
	replicaModels bool
	flags         *pflag.FlagSet
	prefix        string
}

func (s *simFlags) bind(f *pflag.FlagSet, prefix string) {
	syn := sim.DefaultSynthetic()
	slo := sim.DefaultSLO()
	f.IntVar(&s.prefill, prefix+"prefill", 2, "prefill workers of the simulated fleet")
	f.IntVar(&s.decode, prefix+"decode", 2, "decode workers of the simulated fleet")
	f.StringVar(&s.trace, prefix+"trace", "", "Mooncake JSONL trace to replay: testdata/mooncake/sample.jsonl, or the published FAST25-release/traces/synthetic_trace.jsonl of kvcache-ai/Mooncake; empty: the synthetic workload")
	f.Float64Var(&s.rate, prefix+"session-rate", syn.SessionRate, "synthetic workload: new sessions per simulated second")
	f.Float64Var(&s.agentic, prefix+"agentic", syn.AgenticFraction, "synthetic workload: share of agentic sessions")
	f.DurationVar(&s.duration, prefix+"duration", syn.Duration, "synthetic workload: span of session starts (simulated time)")
	f.Uint64Var(&s.seed, prefix+"seed", 1, "seed of the synthetic workload and of the engines' block hashes")
	f.Float64Var(&s.timeScale, prefix+"time-scale", 1, "live runs: simulated seconds per wall second (10 replays an hour in 6 minutes)")
	f.DurationVar(&s.sloTTFT, prefix+"slo-ttft", slo.TTFT, "goodput SLO: time to first token")
	f.DurationVar(&s.sloITL, prefix+"slo-itl", slo.ITL, "goodput SLO: mean inter-token latency per request")
	f.IntVar(&s.maxRequests, prefix+"max-requests", 0, "replay only the first N requests (0: all)")
	f.DurationVar(&s.maxDuration, prefix+"max-duration", 0, "replay only requests arriving within this simulated time (0: all)")
	f.StringVar(&s.wire, prefix+"wire", "map", "KV event encoding the engines publish: map (vLLM ≥ 0.24) or positional (≤ 0.23)")
	f.Int64Var(&s.httpMaxBody, prefix+"http-max-body", sim.DefaultMaxBodyBytes, "live runs: largest request body the engines' OpenAI API reads (bytes; larger: 413)")
	f.DurationVar(&s.kvHold, prefix+"kv-hold-timeout", sim.DefaultKVHoldTimeout, "live runs: how long (simulated) a prefill engine holds KV for a decode engine to pull, as vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT")
	f.DurationVar(&s.arrivalSpread, prefix+"arrival-spread", 0, fmt.Sprintf("spread the requests a trace stamps at one instant toward its next instant, over at most this long (trace time; Mooncake's ticks are ~3 s apart), as a Poisson stream would place them (drawn from --seed); 0: as stamped; at most %s", sim.MaxArrivalSpread))
	f.Float64Var(&s.cpuKVGiB, prefix+"cpu-kv-gib", 0, fmt.Sprintf("host-memory (CPU) KV tier per engine, GiB, as vLLM's CPU offloading keeps it; 0: none; at most %d", sim.MaxHostKVBytes>>30))
	f.Float64Var(&s.cpuKVGBps, prefix+"cpu-kv-gbps", sim.DefaultHardware().HostBytesPerSec/1e9, fmt.Sprintf("bandwidth of loads from the CPU KV tier into the GPU, GB/s (PCIe Gen5 x16 block copies); in (0, %g]", sim.MaxHostBytesPerSec/1e9))
	s.flags, s.prefix = f, prefix
	if !s.sweep {
		f.Float64Var(&s.loadScale, prefix+"load-scale", 1, "multiply the workload's arrival rate (1.5: arrivals 1.5× as dense); in (0, 100]")
		return
	}
	f.Float64SliceVar(&s.loadScales, prefix+"load-scale", []float64{1},
		fmt.Sprintf("multiply the workload's arrival rate (1.5: arrivals 1.5× as dense), each in (0, 100]; a list (0.5,1,1.5,2, at most %d) sweeps the load", sim.MaxLoadScales))
	f.StringVar(&s.slo, prefix+"slo", "", fmt.Sprintf("SLO sets to score goodput under, TTFT ms / ITL ms, like 2000/50,1000/30 (at most %d; the first is the runs' own SLO); default: --slo-ttft/--slo-itl", sim.MaxSLOSets))
	s.bindPolicySLO(f)
}

// bindPolicySLO adds --policy-slo, for the offline runs (sim without --router, sim
// compare, plan); a live run's policy is the router's own config.
func (s *simFlags) bindPolicySLO(f *pflag.FlagSet) {
	f.StringVar(&s.policySLO, s.prefix+"policy-slo", "", "offline runs: the SLO that cond-slo decides with (its slo_ttft_ms/slo_itl_ms), TTFT ms / ITL ms like 1000/25; default: the runs' own SLO (the first --slo set, or --slo-ttft/--slo-itl)")
}

// bindReplicas adds --replicas and --replica-lag, for the offline runs (sim without
// --router, sim compare); a live run's replicas are the router's own.
func (s *simFlags) bindReplicas(f *pflag.FlagSet) {
	f.IntVar(&s.replicas, s.prefix+"replicas", 1, fmt.Sprintf("offline runs: router replicas, requests reaching them round-robin; each sees its own decisions at once and the others' after --replica-lag; 1 to %d", sim.MaxReplicas))
	f.DurationVar(&s.replicaLag, s.prefix+"replica-lag", 0, fmt.Sprintf("offline runs: simulated time before a replica sees a peer's decisions, prefill_done and completions (the log's group commit, fetch and apply); 0 to %s", sim.MaxReplicaLag))
	f.IntVar(&s.replicaHashes, s.prefix+"replica-hashes", 0, fmt.Sprintf("offline runs with --replicas above 1 and --replica-lag above 0: how many leading hashes of a peer's chain a replica sees, as a load delta cut to that many carries it (the rest of the prompt's blocks count without a hash); 0: the whole chain; at most %d", events.MaxDeltaHashes))
	f.BoolVar(&s.replicaModels, s.prefix+"replica-models", false, "offline runs with --replicas above 1: each replica's latency model learns from its own decisions and their outcomes only, as a replica of serve --load-deltas snapshots does; default: one model learns every decision")
	f.BoolVar(&s.replicaShares, s.prefix+"replica-shares", false, "offline runs with --replicas above 1 and --replica-lag above 0: a replica sees its peers' load as serve --load-deltas snapshots shares it, per peer and worker counts (blocks deduplicated within a peer's requests, not across peers) and no peer's hashes for active-prefix matching")
}

// replicaSet is --replicas and --replica-lag, validated. Given with a live router
// (router not empty) they are an error: they would change nothing there.
func (s *simFlags) replicaSet(router string) (sim.Replicas, error) {
	r := sim.Replicas{N: s.replicas, Lag: s.replicaLag, PeerHashes: s.replicaHashes, PeerShares: s.replicaShares, OwnModels: s.replicaModels}
	if router != "" && slices.ContainsFunc([]string{"replicas", "replica-lag", "replica-hashes", "replica-shares", "replica-models"}, func(n string) bool { return s.flags.Changed(s.prefix + n) }) {
		return r, errors.New("--replicas, --replica-lag, --replica-hashes, --replica-shares and --replica-models: offline runs only; with --router the router's replicas are real")
	}
	return r, r.Validate()
}

// replicaNote is what a comparison's header says of its replicas ("" for one).
func replicaNote(r sim.Replicas) string {
	if r.N <= 1 {
		return ""
	}
	return ", " + r.String()
}

// decidingAt is ps set to decide with --policy-slo, or else with the runs' own SLO
// run, so that a run scored at the user's SLO also lets cond-slo aim at it.
func (s *simFlags) decidingAt(ps []sim.Policy, run sim.SLO) ([]sim.Policy, error) {
	at, err := s.policySLOOr(run)
	if err != nil {
		return nil, err
	}
	return sim.PoliciesDecidingAt(ps, at), nil
}

// policySLOOr is --policy-slo, or run when it is not given.
func (s *simFlags) policySLOOr(run sim.SLO) (sim.SLO, error) {
	if s.policySLO == "" {
		return run, nil
	}
	at, err := sim.ParseSLO(s.policySLO)
	if err != nil {
		return sim.SLO{}, fmt.Errorf("--policy-slo: %w", err)
	}
	return at, nil
}

// sloSets are the SLO sets of --slo, or the one set of --slo-ttft and --slo-itl.
func (s *simFlags) sloSets() ([]sim.SLO, error) {
	if s.slo == "" {
		return []sim.SLO{{TTFT: s.sloTTFT, ITL: s.sloITL}}, nil
	}
	if s.flags.Changed(s.prefix+"slo-ttft") || s.flags.Changed(s.prefix+"slo-itl") {
		return nil, errors.New("--slo and --slo-ttft/--slo-itl: give the SLO one way")
	}
	return sim.ParseSLOSets(s.slo)
}

// workload loads the trace or generates the synthetic workload, then cuts and scales it.
func (s *simFlags) workload() (*sim.Workload, error) {
	if !(s.loadScale > 0 && s.loadScale <= 100) {
		return nil, fmt.Errorf("--load-scale %v: must be in (0, 100]", s.loadScale)
	}
	w, err := s.unscaled()
	if err != nil {
		return nil, err
	}
	return w.Scale(s.loadScale), nil
}

// unscaled loads the trace or generates the synthetic workload, then cuts it.
func (s *simFlags) unscaled() (*sim.Workload, error) {
	var (
		w   *sim.Workload
		err error
	)
	if s.trace != "" {
		w, err = sim.LoadMooncake(s.trace)
	} else {
		c := sim.DefaultSynthetic()
		c.Seed, c.SessionRate, c.AgenticFraction, c.Duration = s.seed, s.rate, s.agentic, s.duration
		w, err = sim.Synthetic(c)
	}
	if err != nil {
		return nil, err
	}
	if !(s.cpuKVGiB >= 0 && s.cpuKVGiB*(1<<30) <= sim.MaxHostKVBytes) {
		return nil, fmt.Errorf("--cpu-kv-gib %v: must be in [0, %d]", s.cpuKVGiB, sim.MaxHostKVBytes>>30)
	}
	if !(s.cpuKVGBps > 0 && s.cpuKVGBps*1e9 <= sim.MaxHostBytesPerSec) {
		return nil, fmt.Errorf("--cpu-kv-gbps %v: must be in (0, %g]", s.cpuKVGBps, sim.MaxHostBytesPerSec/1e9)
	}
	if s.arrivalSpread < 0 || s.arrivalSpread > sim.MaxArrivalSpread {
		return nil, fmt.Errorf("--arrival-spread %s: must be in [0, %s]", s.arrivalSpread, sim.MaxArrivalSpread)
	}
	w = w.Until(s.maxDuration).Head(s.maxRequests).Spread(s.arrivalSpread, s.seed)
	if len(w.Requests) == 0 {
		return nil, errors.New("the workload has no requests (check --max-requests and --max-duration)")
	}
	return w, nil
}

func (s *simFlags) fleet() sim.FleetConfig {
	fc := sim.DefaultFleet()
	fc.Prefill, fc.Decode, fc.Seed = s.prefill, s.decode, s.seed
	fc.SLO = sim.SLO{TTFT: s.sloTTFT, ITL: s.sloITL}
	fc.HostKVBytes, fc.Hardware.HostBytesPerSec = s.cpuKVGiB*(1<<30), s.cpuKVGBps*1e9
	return fc
}

// runConfig is the live-run config for a router URL.
func (s *simFlags) runConfig(routerURL string) (sim.RunConfig, error) {
	wf, err := sim.ParseWireFormat(s.wire)
	if err != nil {
		return sim.RunConfig{}, err
	}
	if s.timeScale <= 0 {
		return sim.RunConfig{}, fmt.Errorf("--time-scale %v: must be > 0", s.timeScale)
	}
	if s.httpMaxBody <= 0 || s.kvHold <= 0 {
		return sim.RunConfig{}, fmt.Errorf("--http-max-body %d and --kv-hold-timeout %s: must be > 0", s.httpMaxBody, s.kvHold)
	}
	return sim.RunConfig{RouterURL: routerURL, Fleet: s.fleet(), TimeScale: s.timeScale, Wire: wf,
		MaxBodyBytes: s.httpMaxBody, KVHoldTimeout: s.kvHold}, nil
}

// newSimCmd is `pdrouter sim …`: the fleet simulator.
func newSimCmd(a *app) *cobra.Command {
	var (
		sf        simFlags
		router    string
		authToken string
		policy    string
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulate a vLLM fleet and route a workload through a router",
		Long: `sim runs simulated vLLM engines (Llama-3.1-8B on H100 by default; see the sim
package for every constant and its source) and replays a workload through a router.

With --router URL it runs live: every engine publishes its KV events over real ZMQ
in vLLM's wire format and serves /metrics, registers itself with the router (so its
ingest subscribes and scrapes), and every request goes through POST /v1/route; the
engines obey the decision and lifecycle events are posted back. Use --time-scale to
replay a long trace faster.

Without --router it runs offline: the decider runs in-process (--policy) against an
exact view of the fleet, deterministically, as fast as the CPU allows.

Either way it logs progress and prints a report: TTFT and ITL percentiles, goodput
under the SLO, local versus remote share by reason, prefix cache hits, and prefill
queue and decode KV usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			replicas, err := sf.replicaSet(router)
			if err != nil {
				return err
			}
			w, err := sf.workload()
			if err != nil {
				return err
			}
			if router == "" {
				p, err := sim.PolicyByName(policy)
				if err != nil {
					return err
				}
				ps, err := sf.decidingAt([]sim.Policy{p}, sf.fleet().SLO)
				if err != nil {
					return err
				}
				p = ps[0]
				p.Replicas = replicas
				a.log.Info("sim offline", "policy", p.Name, "requests", len(w.Requests), "prefill", sf.prefill, "decode", sf.decode,
					"replicas", replicas.N, "replica_lag", replicas.Lag)
				rep, err := sim.RunOffline(cmd.Context(), sf.fleet(), w, p, a.log)
				if rep != nil {
					rep.Format(a.stdout)
				}
				return err
			}
			cfg, err := sf.runConfig(router)
			if err != nil {
				return err
			}
			cfg.AuthToken = authToken
			rep, err := sim.RunFleet(cmd.Context(), cfg, w, sim.RunDeps{Log: a.log})
			if rep != nil {
				rep.Format(a.stdout)
			}
			return err
		},
	}
	sf.bind(cmd.Flags(), "")
	sf.bindPolicySLO(cmd.Flags())
	sf.bindReplicas(cmd.Flags())
	cmd.Flags().StringVar(&router, "router", "", "router API base URL (http://127.0.0.1:8080); empty: offline, decider in-process")
	cmd.Flags().StringVar(&authToken, "auth-token", "", "bearer token for the router API")
	cmd.Flags().StringVar(&policy, "policy", sim.CondPrefix+string(decider.DefaultDisaggConfig().Policy),
		"offline only: "+strings.Join(sim.PolicyNames(), ", "))

	var (
		cf        simFlags
		out       string
		shapes    string
		chartLoad string
	)
	compare := &cobra.Command{
		Use:   "compare",
		Short: "Run the same workload under every policy offline and print one table",
		Long: `compare replays one workload on the same fleet under aggregated serving (all
workers decode), always-local and always-remote prefill on the disaggregated
fleet, and each conditional-disaggregation policy with its default thresholds. Runs
are offline and deterministic. With --out it also writes the table and each report
to <dir>/compare.txt, and a chart to <dir>/compare.svg: TTFT and ITL CDFs and
goodput per policy.

--load-scale takes a list (0.5,1,1.5,2): each level is a comparison of its own, and
a table of goodput against load follows; --chart-load draws it. --slo takes SLO
sets (2000/50,1000/30): the same runs are scored under each. The first is the runs'
own SLO, and cond-slo decides with it (its slo_ttft_ms and slo_itl_ms) unless
--policy-slo names another; the report says which SLO it decided with.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			slos, err := cf.sloSets()
			if err != nil {
				return err
			}
			replicas, err := cf.replicaSet("")
			if err != nil {
				return err
			}
			cf.sloTTFT, cf.sloITL = slos[0].TTFT, slos[0].ITL
			loads, err := sim.CheckLoadScales(cf.loadScales)
			if err != nil {
				return err
			}
			cf.loadScale = loads[0]
			w, err := cf.unscaled()
			if err != nil {
				return err
			}
			if (shapes != "" || len(loads) > 1) && out != "" {
				return errors.New("--out with --shapes or several --load-scale levels: a sweep prints its tables; run one shape and load with --out for the files")
			}
			if shapes != "" || len(loads) > 1 || chartLoad != "" {
				list := shapes
				if list == "" {
					list = fmt.Sprintf("%dP%dD", cf.prefill, cf.decode)
				}
				ps, err := cf.decidingAt(sim.PoliciesWithReplicas(sim.Policies(), replicas), slos[0])
				if err != nil {
					return err
				}
				return compareSweep(cmd, a, &cf, w, ps, list, loads, slos, chartLoad)
			}
			ps, err := cf.decidingAt(sim.PoliciesWithReplicas(sim.Policies(), replicas), slos[0])
			if err != nil {
				return err
			}
			w = w.Scale(cf.loadScale)
			start := time.Now()
			reps, err := sim.Compare(cmd.Context(), cf.fleet(), w, ps, a.log)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s: %d requests, %dP%dD, load ×%g, SLO TTFT ≤ %s and ITL ≤ %s%s (computed in %s)\n",
				w.Name, len(w.Requests), cf.prefill, cf.decode, cf.loadScale, cf.sloTTFT, cf.sloITL, replicaNote(replicas), time.Since(start).Round(time.Millisecond))
			printPolicySLO(a.stdout, ps)
			sim.FormatTable(a.stdout, reps)
			if len(slos) > 1 {
				sim.FormatSLOSets(a.stdout, reps, slos)
			}
			if out == "" {
				return nil
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			fh, err := os.Create(filepath.Join(out, "compare.txt"))
			if err != nil {
				return err
			}
			sim.FormatTable(fh, reps)
			if len(slos) > 1 {
				sim.FormatSLOSets(fh, reps, slos)
			}
			for _, r := range reps {
				fmt.Fprintln(fh)
				r.Format(fh)
			}
			if err := fh.Close(); err != nil {
				return err
			}
			svg, err := os.Create(filepath.Join(out, "compare.svg"))
			if err != nil {
				return err
			}
			title := fmt.Sprintf("%s: %d requests, %dP%dD", w.Name, len(w.Requests), cf.prefill, cf.decode)
			if err := sim.WriteCompareSVG(svg, reps, title); err != nil {
				return err
			}
			if err := svg.Close(); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote %s and %s\n", filepath.Join(out, "compare.txt"), filepath.Join(out, "compare.svg"))
			return nil
		},
	}
	cf.sweep = true
	cf.bind(compare.Flags(), "")
	cf.bindReplicas(compare.Flags())
	compare.Flags().StringVar(&out, "out", "", "directory to write compare.txt and compare.svg into (one shape and load level)")
	compare.Flags().StringVar(&shapes, "shapes", "", "sweep fleet shapes of one GPU count, like 2P6D,3P5D,4P4D (overrides --prefill and --decode; not with --out)")
	compare.Flags().StringVar(&chartLoad, "chart-load", "", "SVG file to draw goodput against --load-scale into, one line per policy (a panel per shape and SLO set)")
	cmd.AddCommand(compare)
	return cmd
}

// printPolicySLO prints which SLO the SLO-reading policies of ps decided with, if
// any of them reads one.
func printPolicySLO(w io.Writer, ps []sim.Policy) {
	if note := sim.PolicySLONote(ps); note != "" {
		fmt.Fprintln(w, note)
	}
}

// compareSweep runs the comparison once per shape and load level, in sequence, and
// prints one table per run: the grid of docs/slo-policy.md. With several load levels
// a table of goodput against load follows each shape (per SLO set); with chartPath
// the same figures are drawn.
func compareSweep(cmd *cobra.Command, a *app, cf *simFlags, w *sim.Workload, ps []sim.Policy, list string, loads []float64, slos []sim.SLO, chartPath string) error {
	shapes, err := sim.ParseShapes(list)
	if err != nil {
		return err
	}
	var (
		titles []string
		panels [][]sim.Series
	)
	for _, sh := range shapes {
		fc := cf.fleet()
		fc.Prefill, fc.Decode = sh.Prefill, sh.Decode
		var byLoad [][]*sim.Report
		for _, x := range loads {
			wx := w.Scale(x)
			start := time.Now()
			reps, err := sim.Compare(cmd.Context(), fc, wx, ps, a.log)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s: %d requests, %s, load ×%g, SLO TTFT ≤ %s and ITL ≤ %s%s (computed in %s)\n",
				wx.Name, len(wx.Requests), sh, x, cf.sloTTFT, cf.sloITL, replicaNote(ps[0].Replicas), time.Since(start).Round(time.Millisecond))
			printPolicySLO(a.stdout, ps)
			sim.FormatTable(a.stdout, reps)
			if len(slos) > 1 {
				sim.FormatSLOSets(a.stdout, reps, slos)
			}
			fmt.Fprintln(a.stdout)
			byLoad = append(byLoad, reps)
		}
		for _, slo := range slos {
			if len(loads) > 1 {
				fmt.Fprintf(a.stdout, "%s, %s:\n", w.Name, sh)
				sim.FormatLoadSweep(a.stdout, loads, byLoad, slo)
				fmt.Fprintln(a.stdout)
			}
			titles = append(titles, fmt.Sprintf("%s, SLO %s ms", sh, slo))
			panels = append(panels, sim.LoadSeries(byLoad, slo))
		}
	}
	if chartPath == "" {
		return nil
	}
	title := fmt.Sprintf("%s: %d requests, goodput against load", w.Name, len(w.Requests))
	err = writeAtomically(chartPath, a.stdout, func(f io.Writer) error {
		return sim.WriteLinesSVG(f, title, loads, sim.LoadLabels(loads), "load scale (× the trace's arrival rate)", titles, panels)
	})
	if err == nil {
		fmt.Fprintf(a.stdout, "wrote %s\n", chartPath)
	}
	return err
}
