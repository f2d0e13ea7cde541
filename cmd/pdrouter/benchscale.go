package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/api/loadgen"
	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/addrfile"
	"github.com/pdrouter/pdrouter/internal/memlimit"
	"github.com/pdrouter/pdrouter/internal/scalemodel"
	"github.com/pdrouter/pdrouter/migrations"
)

// scaleBench is `pdrouter bench scale`: the CPU a replica group spends per
// decision, measured on real replica processes, and the group capacity it
// implies (internal/scalemodel).
type scaleBench struct {
	a        *app
	cfg      loadgen.Config
	cores    float64
	json     bool
	validate bool
	floor    bool // also measure floor replicas (benchfloor.go)
	// floorPace paces the floor's load at floorRate, the decisions a second
	// the replicas' group reached (set once it ran).
	floorPace bool
	floorRate float64
	binary    string
	profiles  string // directory for the replicas' CPU profiles, or ""
	memory    string // the replicas' --memory-limit
	// loadDeltas is the replicas' (and floor replicas') --load-deltas.
	loadDeltas string
	brokers    []string
	opts       []kgo.Opt
}

func newBenchScaleCmd(a *app) *cobra.Command {
	b := &scaleBench{a: a, cfg: loadgen.Config{DecodeWorkers: 128, PrefillWorkers: 32, BlockSize: 16, MinTokens: 1024,
		MaxTokens: 32768, SharedPrefixes: 16, Clients: 16, Duration: 20 * time.Second, Warmup: 5 * time.Second, Seed: 1,
		Hashes: true, InFlight: 8}}
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Measure CPU per answered and per applied decision, and model a replica group's capacity",
		Long: `scale starts two 'pdrouter serve' replicas (this binary, --replica-binary) on
fresh topics of --brokers (a real Kafka; default PDR_BROKERS, else
PDR_TEST_BROKERS), registers 128 decode and 32 prefill workers, and loads
the first replica with --clients closed-loop clients sending prompts of
1k-32k tokens (as bench api does, lifecycle events included). The replicas
run under the memory limit the shipped Deployment gives them
(--replica-memory-limit), so their collector runs as deployed. Over the
measured time it reads each replica's process CPU (its
process_cpu_seconds_total) and gives:

  a  CPU µs per answered decision, on the replica that answered it;
  p  CPU µs per applied peer decision, on the replica that only applied it.

A group of N replicas of --cores cores then answers at most
N·C / (a + (N−1)·p) decisions/s, with a scaling efficiency of
a / (a + (N−1)·p); the table gives N = 1, 2, 4, 8, 16. Split into K cells
(serve --cell), a replica applies only its own cell's decisions, and N
replicas answer N·C / (a + (N/K−1)·p); a second table gives K = 2 and 4.
It also prints how the answering replica's group commits batched: appends
per group commit and load delta entries per record, which a peer's p
depends on, and p over each third of the measured time: a peer's store
writes keys for every decision of the group (its request index, active
entry and latency entry), its Pebble's compaction work per decision grows
as the LSM fills, and p with it, so a p that rose over the run is not yet
the p of a replica at its steady size, and the bench says so (--warmup 2m
gives the peer a few minutes' history before the measured time). --json prints only
{"cpu_us_per_answered", "cpu_us_per_applied", "capacity", "efficiency",
"cells", "load_deltas", "appends_per_group", "delta_entries_per_record",
"applied_us_by_part", "applied_pebble_bytes_per_decision"}.

--validate then checks the model on groups of 2 and 3 replica processes
loaded evenly (--clients per replica), and on 2 and 4 replicas split into 2
cells (each cell with the model's fleet): each replica's measured CPU
against a·(decisions it answered) + p·(decisions the other replicas of its
cell answered), within 20%. CPU per
decision does not depend on how busy the machine is, unlike a rate; the
replicas, the load generator and the broker share this machine.

--load-deltas (default apply) is the replicas' mode: with apply, peers
learn each other's load from the compact load-deltas topic and never fetch
decisions or outcomes; with snapshots, from one load-share snapshot per
writer's group commit (each replica fetches only its own partition of
load-deltas); with write or off they apply the whole records.

--floor then runs the same load on two floor replicas, which do a
replica's I/O and none of its work: they read each request's body, append
a record of a decision's size (or a lifecycle event's), with its load delta
when the mode writes deltas, through the same group commit (with
snapshots, the deltas in the writer's own partition and one snapshot per
group commit of the workers its appends touched), fetch back every record
of the topics the mode reads (with snapshots: every load-shares partition,
only their own of load-deltas), and answer. Their a and p are
the floor that HTTP and Kafka set on this machine; what the replicas spend
above it is pdrouter's own work. The floor's load is paced at the decisions
a second the replicas reached (--floor-pace), since part of a peer's cost
is per second (its process's own work, idle or not) and a faster floor
would spread its part over more decisions; its clients stay a closed loop,
held at that rate by a think time after each answer, and what a group
commit held in each run is printed, so that the two can be seen to batch
alike. --json then adds "floor":
{"cpu_us_per_answered", "cpu_us_per_applied", "decisions_per_s"} and
"applied_over_floor" (p over the floor's p).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return b.run(cmd.Context()) },
	}
	f := cmd.Flags()
	f.Float64Var(&b.cores, "cores", 2, "cores per replica, for the modelled capacity")
	f.BoolVar(&b.json, "json", false, "print the model as one JSON object")
	f.BoolVar(&b.validate, "validate", false, "also run groups of 2 and 3 replicas, and 2 and 4 replicas in 2 cells, and compare their CPU with the model's")
	f.BoolVar(&b.floor, "floor", false, "also measure floor replicas, which do a replica's I/O (HTTP, appends, fetches) and none of its work, so that a and p split into that floor and pdrouter's own part")
	f.BoolVar(&b.floorPace, "floor-pace", true, "pace the floor's load at the decisions a second the replicas reached, so that both p are per decision at one rate; false lets the floor's clients go as fast as it answers")
	f.StringVar(&b.binary, "replica-binary", "", "pdrouter binary the replicas run (default: this one)")
	f.StringVar(&b.memory, "replica-memory-limit", replicaMemoryLimit, "the replicas' --memory-limit (default: what auto sets under the shipped Deployment's 4Gi limit, so they collect at --gc-percent as deployed); none for Go's defaults")
	f.StringVar(&b.loadDeltas, "load-deltas", "apply", "the replicas' and floor replicas' --load-deltas: apply (peers apply load deltas), snapshots (peers keep rows of each writer's load-share snapshots), write or off (peers apply whole decisions and outcomes)")
	f.StringVar(&b.profiles, "profile-dir", "", "write each replica's CPU profile over the measured time to this directory (replicas-N-R.pprof; floor-2-R.pprof for --floor)")
	f.IntVar(&b.cfg.Clients, "clients", b.cfg.Clients, "concurrent closed-loop clients")
	f.DurationVar(&b.cfg.Duration, "duration", b.cfg.Duration, "measured time of each group")
	f.DurationVar(&b.cfg.Warmup, "warmup", b.cfg.Warmup, "unmeasured time before it")
	f.IntVar(&b.cfg.DecodeWorkers, "decode-workers", b.cfg.DecodeWorkers, "decode workers to register")
	f.IntVar(&b.cfg.PrefillWorkers, "prefill-workers", b.cfg.PrefillWorkers, "prefill workers to register")
	f.IntVar(&b.cfg.MinTokens, "min-tokens", b.cfg.MinTokens, "shortest prompt, in tokens")
	f.IntVar(&b.cfg.MaxTokens, "max-tokens", b.cfg.MaxTokens, "longest prompt, in tokens")
	return cmd
}

// testBrokersEnv is the variable the test broker is announced in
// (internal/kafkatest.EnvBrokers, which the binary does not import).
const testBrokersEnv = "PDR_TEST_BROKERS"

// replicaMemoryLimit is what --memory-limit auto gives a replica under the
// memory limit of deployments/k8s/base/deployment.yaml (4Gi, of which
// 90%). Under a limit a replica collects at --gc-percent 400 instead of the
// runtime's 100, which took ~15% off both a and p here (docs/scaling.md):
// a machine without a cgroup limit would otherwise measure replicas that
// collect four times as often as deployed ones.
const replicaMemoryLimit = "3.6GiB"

// scaleTolerance is how far a replica's measured CPU may be from the
// model's for --validate to pass.
const scaleTolerance = 0.20

func (b *scaleBench) run(ctx context.Context) error {
	if _, _, err := parseLoadDeltas(b.loadDeltas); err != nil {
		return err
	}
	if b.cores <= 0 || b.cfg.Clients < 1 || b.cfg.MinTokens < 1 || b.cfg.MaxTokens < b.cfg.MinTokens || b.cfg.DecodeWorkers < 1 {
		return errors.New("bench scale: need --cores > 0, --clients ≥ 1, 1 ≤ --min-tokens ≤ --max-tokens, --decode-workers ≥ 1")
	}
	// Refused here, not by replicas that would fail to start after the
	// bench made their topics.
	if _, err := memlimit.Plan(memlimit.Config{Limit: b.memory}, memlimit.SystemDeps(b.a.env)); err != nil {
		return fmt.Errorf("--replica-memory-limit: %w", err)
	}
	b.brokers = b.a.kafka.Brokers
	if len(b.brokers) == 0 {
		if v, ok := b.a.env(testBrokersEnv); ok && strings.TrimSpace(v) != "" {
			b.brokers = strings.Split(strings.TrimSpace(v), ",")
			b.a.kafka.Brokers = b.brokers
		}
	}
	if len(b.brokers) == 0 {
		return fmt.Errorf("bench scale needs a Kafka broker: --brokers, PDR_BROKERS or %s", testBrokersEnv)
	}
	opts, err := b.a.kafkaOpts("bench-scale")
	if err != nil {
		return err
	}
	b.opts = opts
	if b.binary == "" {
		if b.binary, err = os.Executable(); err != nil {
			return fmt.Errorf("bench scale: finding this binary to run the replicas: %w", err)
		}
	}
	b.cfg.Log = b.a.log
	// The model: one replica answers, one applies.
	g, err := b.runGroup(ctx, 2, 1, false, false)
	if err != nil {
		return err
	}
	m := modelOf(g)
	var floor *scalemodel.Model
	var fg groupRun
	if b.floor {
		if b.floorPace {
			b.floorRate = g.res.Throughput
		}
		if fg, err = b.runGroup(ctx, 2, 1, false, true); err != nil {
			return err
		}
		fm := modelOf(fg)
		floor = &fm
	}
	if b.json {
		s := m.JSON(b.cores)
		if floor != nil {
			// The object's keys stay those of the model; the floor is one
			// more, set only by --floor.
			s = fmt.Sprintf(`%s, "floor": {"cpu_us_per_answered": %.1f, "cpu_us_per_applied": %.1f, "decisions_per_s": %.0f}, "applied_over_floor": %.2f}`,
				s[:len(s)-1], floor.AnsweredUS, floor.AppliedUS, fg.res.Throughput, m.AppliedUS/floor.AppliedUS)
		}
		byPart, _ := json.Marshal(roundedTenths(g.appliedByPart))
		s = fmt.Sprintf(`%s, "decisions_per_s": %.0f, "load_deltas": %q, "appends_per_group": %.2f, "delta_entries_per_record": %.2f, "applied_us_by_part": %s, "applied_pebble_bytes_per_decision": %.0f}`,
			s[:len(s)-1], g.res.Throughput, b.loadDeltas, g.shape.appendsPerGroup, g.shape.entriesPerRecord, byPart, g.peerPebbleBytes)
		fmt.Fprintln(b.a.stdout, s)
	} else {
		b.printModel(g, m)
		if floor != nil {
			b.printFloor(g, fg, m, *floor)
		}
	}
	if !b.validate {
		return nil
	}
	out := b.a.stdout
	if b.json {
		out = b.a.stderr // stdout holds the JSON object alone
	}
	missed := false
	// Two groups of one cell, then two cells of one and of two replicas:
	// a replica of a cell must cost only its cell's decisions.
	for _, size := range [][2]int{{2, 1}, {3, 1}, {2, 2}, {4, 2}} {
		g, err := b.runGroup(ctx, size[0], size[1], true, false)
		if err != nil {
			return err
		}
		missed = b.printValidation(out, g, m) || missed
	}
	if missed {
		return fmt.Errorf("bench scale: a replica's CPU is more than %.0f%% from the model's", scaleTolerance*100)
	}
	return nil
}

// roundedTenths rounds each value to 0.1, as the other figures are
// printed; never null in JSON.
func roundedTenths(vs []float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = math.Round(v*10) / 10
	}
	return out
}

// groupRun is one measured run of a replica group.
type groupRun struct {
	n, cells  int
	res       loadgen.Result
	decisions int       // answered over the measured time, whole group
	answered  []int     // by replica
	cpu       []float64 // CPU seconds over the measured time, by replica
	shape     commitShape
	// appliedByPart is p over each of scaleParts equal parts of the
	// measured time, for the model's run (tracePeer).
	appliedByPart []float64
	// peerPebbleBytes is what the applying replica's Pebble wrote in
	// flushes and compactions per decision, for the model's run.
	peerPebbleBytes float64
}

// scaleParts is how many parts the model's measured time is split into
// to show whether p held still over it. A peer's store writes keys for
// every decision of the group, and Pebble's compaction work per decision
// grows as its LSM fills (docs/scaling.md, "p at a steady size"): p
// measured over a short run is the p of a young store, not of a replica
// at its steady size.
const scaleParts = 3

// pRising is the rise of p from the first part to the last past which
// the bench warns that the run was too short to measure a steady p.
const pRising = 0.2

// commitShape is how the answering replica's group commits batched, over
// the whole run: appends per group commit and load delta entries per
// record. A peer's cost per decision depends on both (fewer, larger
// records to fetch and apply), so the bench prints them beside a and p.
type commitShape struct {
	appendsPerGroup, entriesPerRecord float64
	// sharesPerSnapshot: workers a load-share snapshot held (snapshots).
	sharesPerSnapshot float64
}

// shapeOf reads r's commit shape from its histograms' sums and counts;
// a histogram it does not have (no load deltas) reads as 0.
func shapeOf(ctx context.Context, r *scaleReplica) commitShape {
	mean := func(sum, n float64) float64 {
		if n == 0 {
			return 0
		}
		return sum / n
	}
	var sh commitShape
	if v, err := r.metrics(ctx, "pdrouter_eventlog_group_appends_sum", "pdrouter_eventlog_group_appends_count"); err == nil {
		sh.appendsPerGroup = mean(v[0], v[1])
	}
	if v, err := r.metrics(ctx, "pdrouter_load_delta_record_entries_sum", "pdrouter_load_delta_record_entries_count"); err == nil {
		sh.entriesPerRecord = mean(v[0], v[1])
	}
	if v, err := r.metrics(ctx, "pdrouter_load_share_record_workers_sum", "pdrouter_load_share_record_workers_count"); err == nil {
		sh.sharesPerSnapshot = mean(v[0], v[1])
	}
	return sh
}

// modelOf is the model of a group of two whose first replica answered
// every decision and whose second applied them.
func modelOf(g groupRun) scalemodel.Model {
	return scalemodel.Model{AnsweredUS: g.cpu[0] * 1e6 / float64(g.decisions), AppliedUS: g.cpu[1] * 1e6 / float64(g.decisions)}
}

// runGroup runs n replicas on fresh topics, replica i in cell i mod
// cells; spread sends the load to all of them, else to the first only;
// floor runs floor replicas instead of serve.
func (b *scaleBench) runGroup(ctx context.Context, n, cells int, spread, floor bool) (groupRun, error) {
	prefix := fmt.Sprintf("bench-scale-%d.", time.Now().UnixNano())
	specs, err := migrations.Declarations(migrations.SingleNodeOptions(prefix))
	if err != nil {
		return groupRun{}, err
	}
	defer deleteBenchTopics(b.a, b.opts, specs)
	if _, err := runMigrate(ctx, b.opts, specs, false); err != nil {
		return groupRun{}, err
	}
	dir, err := mkdirTempUnder(filepath.Join(b.a.dataDir, "bench"))
	if err != nil {
		return groupRun{}, err
	}
	defer removeAll(dir)
	reps := make([]*scaleReplica, 0, n)
	defer func() {
		for _, r := range reps {
			r.stop()
		}
	}()
	for i := range n {
		r, err := b.startReplica(ctx, prefix, filepath.Join(dir, strconv.Itoa(i)), i, events.Cell{Index: int32(i % cells), Count: int32(cells)}, floor)
		if err != nil {
			return groupRun{}, err
		}
		reps = append(reps, r)
	}
	for _, r := range reps {
		if err := r.waitReady(ctx, 60*time.Second); err != nil {
			return groupRun{}, err
		}
	}
	cfg := b.cfg
	cfg.URL, cfg.Cells = reps[0].url, cells
	if floor {
		cfg.Rate = b.floorRate
	}
	// Each cell gets the model's fleet, so its decisions cost what the
	// model's do and the run checks the model's structure: a replica
	// applies its own cell's decisions only. Splitting one fleet into
	// cells also makes each decision cheaper (fewer candidates, a smaller
	// record), which the model, measured on the whole fleet, leaves out.
	cfg.DecodeWorkers *= cells
	cfg.PrefillWorkers *= cells
	if spread {
		for _, r := range reps[1:] {
			cfg.Spread = append(cfg.Spread, r.url)
		}
		// --clients per replica, as the answering replica of the model's
		// run had: fewer concurrent requests per replica would put fewer
		// appends in each group commit and fewer records in each fetch,
		// and cost more CPU per decision than the model measured.
		cfg.Clients *= n
	}
	g := groupRun{n: n, cells: cells, cpu: make([]float64, n)}
	var readErr error
	read := func(sign float64) {
		for i, r := range reps {
			c, err := r.cpuSeconds(ctx)
			if err != nil {
				readErr = err
			}
			g.cpu[i] += sign * c
		}
	}
	var profiling sync.WaitGroup
	var trace *peerTrace
	cfg.OnMeasure = func(measuring bool) {
		if measuring {
			read(-1)
			b.startProfiles(ctx, &profiling, reps, map[bool]string{false: "replicas", true: "floor"}[floor])
			if n == 2 && !spread && !floor {
				trace = tracePeer(ctx, reps[0], reps[1], b.cfg.Duration/scaleParts)
			}
		} else {
			read(+1)
			if trace != nil {
				samples := trace.stop(ctx)
				g.appliedByPart, g.peerPebbleBytes = perPart(samples), pebbleBytesPerDecision(samples)
			}
		}
	}
	b.a.log.Info("bench scale: group", "replicas", n, "cells", cells, "floor", floor, "load_on", map[bool]string{true: "every replica", false: "the first replica"}[spread])
	res, err := loadgen.Run(ctx, cfg)
	profiling.Wait()
	if err != nil {
		return groupRun{}, exitedDuring(reps, err)
	}
	if readErr != nil {
		return groupRun{}, fmt.Errorf("bench scale: reading a replica's CPU: %w", readErr)
	}
	if floor {
		if err := checkFloorFetched(ctx, reps); err != nil {
			return groupRun{}, err
		}
	}
	g.res, g.decisions = res, res.Requests
	g.shape = shapeOf(ctx, reps[0])
	g.answered = make([]int, n)
	copy(g.answered, res.ByTarget)
	return g, nil
}

// peerTrace samples, during the model's measured time, the decisions the
// answering replica made and the CPU the applying one spent, so that p
// can be given by part of that time, and the bytes the applying one's
// Pebble wrote in flushes and compactions, the work that grows with the
// history its store keeps.
type peerTrace struct {
	answering, applying *scaleReplica
	done                chan struct{}
	wg                  sync.WaitGroup
	mu                  sync.Mutex
	samples             []peerSample
}

// tracePeer samples at once and then every interval, parts−1 times: the
// last sample is stop's, at the end of the measured time.
func tracePeer(ctx context.Context, answering, applying *scaleReplica, every time.Duration) *peerTrace {
	t := &peerTrace{answering: answering, applying: applying, done: make(chan struct{})}
	t.sample(ctx)
	t.wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for range scaleParts - 1 {
			select {
			case <-t.done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				t.sample(ctx)
			}
		}
	})
	return t
}

// peerSample is one reading of the counters peerTrace follows.
type peerSample struct {
	decisions, cpuSeconds, pebbleBytes float64
}

// sample reads the counters; a failed read leaves the sample out, and its
// part is then merged into the next.
func (t *peerTrace) sample(ctx context.Context) {
	d, err := t.answering.metric(ctx, "pdrouter_decision_duration_seconds_count")
	if err != nil {
		return
	}
	v, err := t.applying.metrics(ctx, "process_cpu_seconds_total", "pdrouter_statestore_compacted_bytes_total", "pdrouter_statestore_flushed_bytes_total")
	if err != nil {
		return
	}
	t.mu.Lock()
	t.samples = append(t.samples, peerSample{decisions: d, cpuSeconds: v[0], pebbleBytes: v[1] + v[2]})
	t.mu.Unlock()
}

// stop takes the last sample and returns the samples.
func (t *peerTrace) stop(ctx context.Context) []peerSample {
	close(t.done)
	t.wg.Wait()
	t.sample(ctx)
	return t.samples
}

// perPart is p in µs per decision between successive samples; a part
// without decisions is merged into the next.
func perPart(samples []peerSample) []float64 {
	var out []float64
	last := 0
	for i := 1; i < len(samples); i++ {
		dd, dc := samples[i].decisions-samples[last].decisions, samples[i].cpuSeconds-samples[last].cpuSeconds
		if dd > 0 {
			out = append(out, dc*1e6/dd)
			last = i
		}
	}
	return out
}

// pebbleBytesPerDecision is what the peer's Pebble wrote in flushes and
// compactions per decision over all the samples (0 without decisions).
func pebbleBytesPerDecision(samples []peerSample) float64 {
	if len(samples) < 2 {
		return 0
	}
	first, last := samples[0], samples[len(samples)-1]
	if dd := last.decisions - first.decisions; dd > 0 {
		return (last.pebbleBytes - first.pebbleBytes) / dd
	}
	return 0
}

// rise is how much p grew from the first part to the last (0 with fewer
// than two parts).
func rise(ps []float64) float64 {
	if len(ps) < 2 || ps[0] <= 0 {
		return 0
	}
	return ps[len(ps)-1]/ps[0] - 1
}

// startProfiles has each replica profile its CPU over the measured time,
// through its debug endpoint, when --profile-dir asks for it. A profile
// that cannot be taken is logged, not fatal: the figures stand without it.
func (b *scaleBench) startProfiles(ctx context.Context, wg *sync.WaitGroup, reps []*scaleReplica, kind string) {
	if b.profiles == "" {
		return
	}
	if err := os.MkdirAll(b.profiles, 0o755); err != nil {
		b.a.log.Warn("bench scale: no CPU profiles", "err", err)
		return
	}
	secs := max(1, int(b.cfg.Duration.Seconds()))
	for i, r := range reps {
		path := filepath.Join(b.profiles, fmt.Sprintf("%s-%d-%d.pprof", kind, len(reps), i))
		wg.Go(func() {
			if err := r.profile(ctx, secs, path); err != nil {
				b.a.log.Warn("bench scale: no CPU profile", "replica", i, "err", err)
				return
			}
			b.a.log.Info("bench scale: CPU profile", "replica", i, "path", path)
		})
	}
}

func (b *scaleBench) printModel(g groupRun, m scalemodel.Model) {
	w := tabwriter.NewWriter(b.a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "bench scale\t2 replica processes on %s; the first answers, the second applies\n", strings.Join(b.brokers, ","))
	fmt.Fprintf(w, "fleet\t%d decode + %d prefill workers, prompts %d–%d tokens\n", b.cfg.DecodeWorkers, b.cfg.PrefillWorkers, b.cfg.MinTokens, b.cfg.MaxTokens)
	fmt.Fprintf(w, "load deltas\t%s\t(peers apply %s)\n", b.loadDeltas, peersApply(b.loadDeltas))
	fmt.Fprintf(w, "decisions\t%d in %s (%.0f/s; p50 %s, p99 %s, p99.9 %s), %d completions\n", g.decisions, g.res.Elapsed.Round(time.Millisecond),
		g.res.Throughput, g.res.P50.Round(time.Microsecond), g.res.P99.Round(time.Microsecond), g.res.P999.Round(time.Microsecond), g.res.Completions)
	fmt.Fprintf(w, "cpu per answered decision\t%.1f µs\t(a: the answering replica, %.2f cores)\n", m.AnsweredUS, g.cpu[0]/g.res.Elapsed.Seconds())
	fmt.Fprintf(w, "cpu per applied peer decision\t%.1f µs\t(p: the other replica, %.2f cores)\n", m.AppliedUS, g.cpu[1]/g.res.Elapsed.Seconds())
	if len(g.appliedByPart) > 0 {
		parts := make([]string, len(g.appliedByPart))
		for i, p := range g.appliedByPart {
			parts[i] = fmt.Sprintf("%.1f", p)
		}
		note := "(p over successive parts of the measured time)"
		if r := rise(g.appliedByPart); r > pRising {
			note = fmt.Sprintf("(rose %.0f%% over the measured time: the peer's state was still growing; a longer --warmup gives it history before the measured time)", 100*r)
		}
		fmt.Fprintf(w, "p by part of the time\t%s µs\t%s\n", strings.Join(parts, ", "), note)
		fmt.Fprintf(w, "peer's Pebble writes\t%.1f KB per decision\t(its flushes and compactions: they grow as its LSM fills)\n", g.peerPebbleBytes/1024)
	}
	fmt.Fprintf(w, "group commits\t%.1f appends each, %.1f load delta entries a record\t(the answering replica)\n", g.shape.appendsPerGroup, g.shape.entriesPerRecord)
	fmt.Fprintf(w, "load average\t%s\n", loadAverage())
	_ = w.Flush()
	fmt.Fprintf(b.a.stdout, "\ngroup of N replicas × %g cores: capacity N·C/(a+(N−1)·p), efficiency a/(a+(N−1)·p)\n", b.cores)
	w = tabwriter.NewWriter(b.a.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "replicas\tdecisions/s\tefficiency\t\n")
	for _, n := range scalemodel.Sizes {
		fmt.Fprintf(w, "%d\t%.0f\t%.3f\t\n", n, m.Capacity(n, b.cores), m.Efficiency(n))
	}
	_ = w.Flush()
	fmt.Fprintf(b.a.stdout, "\nthe same N replicas split into K cells of N/K (serve --cell): capacity N·C/(a+(N/K−1)·p), efficiency a/(a+(N/K−1)·p)\n")
	w = tabwriter.NewWriter(b.a.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "replicas\tcells\tdecisions/s\tefficiency\t\n")
	for _, k := range scalemodel.Cells {
		for _, n := range scalemodel.Sizes {
			if e := m.CellEfficiency(n, k); e > 0 {
				fmt.Fprintf(w, "%d\t%d\t%.0f\t%.3f\t\n", n, k, m.CellCapacity(n, k, b.cores), e)
			}
		}
	}
	_ = w.Flush()
}

// peersApply says what a peer of a --load-deltas mode applies of the
// decisions of its group, for the printed table.
func peersApply(mode string) string {
	switch mode {
	case "apply":
		return "load deltas"
	case "snapshots":
		return "the writers' load-share snapshots, one per group commit"
	}
	return "whole decisions and outcomes"
}

// printFloor prints the floor replicas' a and p beside the model's: what
// is left is the part of each that pdrouter's own work costs.
func (b *scaleBench) printFloor(g, fg groupRun, m, floor scalemodel.Model) {
	paced := "unpaced"
	if b.floorRate > 0 {
		paced = fmt.Sprintf("paced at the replicas' %.0f/s", b.floorRate)
	}
	fmt.Fprintf(b.a.stdout, "\nfloor: 2 floor replicas (a replica's HTTP, appends and fetches, none of its work), --load-deltas %s; %d decisions in %s (%.0f/s, %s), load average %s\n",
		b.loadDeltas, fg.decisions, fg.res.Elapsed.Round(time.Millisecond), fg.res.Throughput, paced, loadAverage())
	w := tabwriter.NewWriter(b.a.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "cpu µs per decision\treplicas\tfloor\tabove the floor\t\n")
	for _, r := range []struct {
		name      string
		got, base float64
	}{{"answered (a)", m.AnsweredUS, floor.AnsweredUS}, {"applied (p)", m.AppliedUS, floor.AppliedUS}} {
		fmt.Fprintf(w, "%s\t%.1f\t%.1f\t%.1f (%.0f%%)\t\n", r.name, r.got, r.base, r.got-r.base, 100*(r.got-r.base)/r.got)
	}
	_ = w.Flush()
	// Pacing spaces requests evenly, where closed-loop clients send again
	// together when one commit answers them: what each group commit holds
	// shows whether the two runs batched alike.
	shape := func(sh commitShape) string {
		out := fmt.Sprintf("%.1f appends a group commit", sh.appendsPerGroup)
		if b.loadDeltas == "snapshots" {
			out += fmt.Sprintf(", %.1f workers a snapshot", sh.sharesPerSnapshot)
		}
		return out
	}
	fmt.Fprintf(b.a.stdout, "answering replica: %s; floor's: %s\n", shape(g.shape), shape(fg.shape))
	fmt.Fprintf(b.a.stdout, "p / floor's p: %.2f; efficiency at 8 replicas: %.3f (the floor's own: %.3f)\n",
		m.AppliedUS/floor.AppliedUS, m.Efficiency(8), floor.Efficiency(8))
}

// printValidation prints a group's measured CPU against the model's and
// reports whether a replica missed the tolerance.
func (b *scaleBench) printValidation(out io.Writer, g groupRun, m scalemodel.Model) bool {
	fmt.Fprintf(out, "\nvalidate: %d replicas in %d cell(s), load spread over all (%d clients each); %d decisions in %s (%.0f/s), load average %s\n",
		g.n, g.cells, b.cfg.Clients, g.decisions, g.res.Elapsed.Round(time.Millisecond), g.res.Throughput, loadAverage())
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "replica\tcell\tanswered\tapplied\tmeasured cpu s\tmodelled cpu s\tmeasured/modelled\t\n")
	missed := false
	var sumM, sumP float64
	// A replica applies the decisions its cell's other replicas answered.
	cellTotal := make([]int, g.cells)
	for i := range g.n {
		cellTotal[i%g.cells] += g.answered[i]
	}
	for i := range g.n {
		total := cellTotal[i%g.cells]
		modelled := m.ReplicaCPU(g.answered[i], total)
		ratio := g.cpu[i] / modelled
		if math.IsNaN(ratio) || math.Abs(ratio-1) > scaleTolerance {
			missed = true
		}
		sumM, sumP = sumM+g.cpu[i], sumP+modelled
		fmt.Fprintf(w, "%d\t%d/%d\t%d\t%d\t%.2f\t%.2f\t%.3f\t\n", i, i%g.cells, g.cells, g.answered[i], total-g.answered[i], g.cpu[i], modelled, ratio)
	}
	fmt.Fprintf(w, "group\t\t%d\t\t%.2f\t%.2f\t%.3f\t\n", g.decisions, sumM, sumP, sumM/sumP)
	_ = w.Flush()
	fmt.Fprintf(out, "verdict\t%s (each replica within %.0f%%)\n", map[bool]string{true: "MISSED", false: "ok"}[missed], scaleTolerance*100)
	return missed
}

// loadAverage is the 1-minute load average, or "unknown".
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(raw)); len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

// scaleReplica is one `pdrouter serve` process of a bench group.
type scaleReplica struct {
	cmd      *exec.Cmd
	name     string // its --replica-id, until url is known
	addrFile string // where it writes its addresses (its --addr-file)
	url      string // set by waitReady, from addrFile
	debugURL string // its --debug-addr, when --profile-dir gave it one
	done     chan error
	out      *tailBuffer // its stdout and stderr, for the error when it fails
}

// profile writes the replica's CPU profile over the next secs seconds.
func (r *scaleReplica) profile(ctx context.Context, secs int, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", r.debugURL, secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// tailBuffer keeps the last max bytes written to it. A replica's output
// goes there rather than to this process's stderr: several processes'
// copies would interleave with each other and with this process's log.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

func (b *scaleBench) startReplica(ctx context.Context, prefix, dir string, index int, cell events.Cell, floor bool) (*scaleReplica, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Every flag that shapes the run is given, so no PDR_ variable of this
	// environment changes it; Kafka's TLS and SASL settings reach the
	// replicas through the environment. Each replica binds ports of its
	// own choosing and writes them to --addr-file: an inherited
	// PDR_DEBUG_ADDR would be bound by the first replica and refused to
	// the rest, and a port picked here and passed on could be taken by
	// another process before the replica binds it.
	debugAddr := ""
	if b.profiles != "" {
		debugAddr = "127.0.0.1:0"
	}
	// Each replica its own --replica-id (serve's default, the host name, is
	// one for all): with snapshots it keys the replica's snapshots.
	name := fmt.Sprintf("bench-%d", index)
	addrFile := filepath.Join(dir, "addr.json")
	common := []string{"--brokers", strings.Join(b.brokers, ","), "--topic-prefix", prefix, "--http-addr", "127.0.0.1:0", "--debug-addr", debugAddr,
		"--addr-file", addrFile, "--memory-limit", b.memory, "--log-level", "warn", "--log-format", b.a.logFormat, "--load-deltas", b.loadDeltas, "--replica-id", name}
	binary, args := b.binary, append([]string{"serve", "--data-dir", dir, "--router-conditional-disagg", "--cell", cell.String()}, common...)
	var err error
	if floor {
		// This binary's floor, whatever --replica-binary runs: the floor
		// is I/O, not the code under test.
		if binary, err = os.Executable(); err != nil {
			return nil, err
		}
		args = append([]string{"bench", "floor-replica", "--max-tokens", strconv.Itoa(b.cfg.MaxTokens), "--block-size", strconv.Itoa(b.cfg.BlockSize),
			"--decode-workers", strconv.Itoa(b.cfg.DecodeWorkers), "--prefill-workers", strconv.Itoa(b.cfg.PrefillWorkers)}, common...)
	}
	cmd := exec.CommandContext(ctx, binary, args...)
	out := &tailBuffer{max: 16 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench scale: starting a replica (%s): %w", binary, err)
	}
	r := &scaleReplica{cmd: cmd, name: name, addrFile: addrFile, done: make(chan error, 1), out: out}
	go func() { r.done <- cmd.Wait() }()
	return r, nil
}

// exited reports whether the replica's process has exited, and its
// error if so.
func (r *scaleReplica) exited() (bool, error) {
	select {
	case err := <-r.done:
		r.done <- err
		return true, err
	default:
		return false, nil
	}
}

// exitedDuring is the error of a run that failed with err: the exit of a
// replica that is gone, with the end of its output, wrapping err, which
// says only what its absence caused (a refused connection).
func exitedDuring(reps []*scaleReplica, err error) error {
	for _, r := range reps {
		if ok, exit := r.exited(); ok {
			return fmt.Errorf("bench scale: replica %s exited during the run (%v): %w; its output ends with:\n%s", r.url, exit, err, r.out)
		}
	}
	return err
}

// waitReady waits until the replica has written its addresses and its
// /readyz answers 200.
func (r *scaleReplica) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	exited := func() error {
		if ok, exit := r.exited(); ok {
			return fmt.Errorf("bench scale: replica %s exited before it was ready: %v; its output ends with:\n%s", r.name, exit, r.out)
		}
		return nil
	}
	if r.url == "" {
		a, err := addrfile.Wait(ctx, r.addrFile, 50*time.Millisecond, exited)
		if err != nil {
			return fmt.Errorf("bench scale: replica %s did not listen: %w; its output ends with:\n%s", r.name, err, r.out)
		}
		r.url = "http://" + a.HTTP
		if a.Debug != "" {
			r.debugURL = "http://" + a.Debug
		}
	}
	for {
		if err := exited(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench scale: replica %s (%s) not ready after %s; its output ends with:\n%s", r.name, r.url, timeout, r.out)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// cpuSeconds reads the replica's process_cpu_seconds_total.
func (r *scaleReplica) cpuSeconds(ctx context.Context) (float64, error) {
	return r.metric(ctx, "process_cpu_seconds_total")
}

// metric reads an unlabelled metric of the replica's /metrics.
func (r *scaleReplica) metric(ctx context.Context, name string) (float64, error) {
	vs, err := r.metrics(ctx, name)
	if err != nil {
		return 0, err
	}
	return vs[0], nil
}

// metrics reads unlabelled metrics of the replica's /metrics in one
// scrape, in the order of names.
func (r *scaleReplica) metrics(ctx context.Context, names ...string) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, found := make([]float64, len(names)), make([]bool, len(names))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for i, name := range names {
			if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok && !found[i] {
				if out[i], err = strconv.ParseFloat(v, 64); err != nil {
					return nil, err
				}
				found[i] = true
			}
		}
	}
	for i, ok := range found {
		if !ok {
			return nil, fmt.Errorf("%s/metrics has no %s", r.url, names[i])
		}
	}
	return out, nil
}

// floorFetchWait bounds how long bench scale waits for floor replicas to
// fetch the last records their group appended (at most a fetch's wait
// behind, unless they fall behind).
const floorFetchWait = 30 * time.Second

// checkFloorFetched verifies that every floor replica fetched every record
// the group appended for all to read, and the records it appended for
// itself alone (its own load deltas with --load-deltas snapshots): a floor
// replica that fetched less would have done less than a replica must, and
// its p would be too low.
func checkFloorFetched(ctx context.Context, reps []*scaleReplica) error {
	deadline := time.Now().Add(floorFetchWait)
	for {
		appended, behind := 0.0, ""
		fetched, own := make([]float64, len(reps)), make([]float64, len(reps))
		for i, r := range reps {
			v, err := r.metrics(ctx, floorAppendedMetric, floorFetchedMetric, floorOwnMetric)
			if err != nil {
				return err
			}
			appended += v[0]
			fetched[i], own[i] = v[1], v[2]
		}
		for i, r := range reps {
			if fetched[i] < appended+own[i] {
				behind = fmt.Sprintf("floor replica %s fetched %.0f of the %.0f records its group appended for all and the %.0f it appended for itself", r.url, fetched[i], appended, own[i])
			}
		}
		if behind == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench scale: after %s, %s", floorFetchWait, behind)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *scaleReplica) stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}
