package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/internal/rejects"
	"github.com/pdrouter/pdrouter/kafkaconn"
	"github.com/pdrouter/pdrouter/kafkaconn/devbroker"
	"github.com/pdrouter/pdrouter/migrations"
	"github.com/pdrouter/pdrouter/replay"
	"github.com/pdrouter/pdrouter/sim"
)

// defaultDevKafkaPort is Kafka's usual port, so tools find the dev broker
// without flags.
const defaultDevKafkaPort = 9092

func newDevCmd(a *app) *cobra.Command {
	var (
		port      int
		exitAfter time.Duration
		rf        routerFlags
		inf       ingestFlags
		sf        simFlags
		withSim   bool
		simExit   bool
		simVia    string
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the embedded development stack (what `make run` runs)",
		Long: `dev runs everything on this machine with no external service: an embedded
Kafka-protocol broker (franz-go's kfake, persisted under --data-dir/kafka so
the log survives a restart) with pdrouter's topics migrated, ingest (a worker
registered with a kv_events_endpoint is enough for its events to flow), and
a router replica answering the API on --http-addr. It prints where
everything listens. It is for development and demos, not production: point
` + "`pdrouter serve`" + ` at a real Kafka with --brokers instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !a.kafka.Embedded() {
				return fmt.Errorf("dev runs its own broker: drop --brokers/PDR_BROKERS (%s), or use pdrouter serve for a real Kafka", strings.Join(a.kafka.Brokers, ","))
			}
			if simVia != simViaRoute && simVia != simViaDoor {
				return fmt.Errorf("--sim-via %q: want %s or %s", simVia, simViaRoute, simViaDoor)
			}
			ctx := cmd.Context()
			if exitAfter > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, exitAfter)
				defer cancel()
			}
			start := time.Now()
			b, err := devbroker.Start(filepath.Join(a.dataDir, "kafka"), devbroker.Port(port))
			if err != nil {
				return err
			}
			defer b.Close()
			conn := append([]kgo.Opt{kgo.SeedBrokers(b.Addrs()...)}, kafkaconn.ClientOpts("dev", a.kafkaLog)...)
			specs, err := migrations.Declarations(migrations.SingleNodeOptions(a.topicPrefix))
			if err != nil {
				return err
			}
			mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			res, err := runMigrate(mctx, conn, specs, false)
			cancel()
			if err != nil {
				return fmt.Errorf("dev: migrate the dev broker: %w", err)
			}
			icfg, err := inf.config(a)
			if err != nil {
				return err
			}
			var workload *sim.Workload
			if withSim {
				if workload, err = sf.workload(); err != nil {
					return err
				}
			}
			ctx, stop := context.WithCancel(ctx)
			defer stop()
			var metrics prometheus.Registerer
			simDone := make(chan error, 1)
			r := &routerRun{a: a, f: &rf, connOpts: conn, ingestCfg: &icfg, registered: func(reg prometheus.Registerer) { metrics = reg }, listening: func(addr string) {
				fmt.Fprintf(a.stdout, "pdrouter dev — %s\n", devbroker.Label)
				fmt.Fprintf(a.stdout, "  kafka      %s   (log in %s)\n", strings.Join(b.Addrs(), ","), b.Dir())
				fmt.Fprintf(a.stdout, "  topics     %d created, %d already there, prefix %q\n", res.Changed(), len(res.Topics)-res.Changed(), a.topicPrefix)
				fmt.Fprintf(a.stdout, "  api        http://%s   (openapi: /openapi.json, metrics: /metrics)\n", addr)
				fmt.Fprintf(a.stdout, "  store      %s\n", filepath.Join(a.dataDir, "store"))
				fmt.Fprintf(a.stdout, "  ingest     watching registrations on the workers topic\n")
				fmt.Fprintf(a.stdout, "  try        pdrouter log tail decisions --brokers %s --json\n", b.Addrs()[0])
				fmt.Fprintf(a.stdout, "  stop       Ctrl-C\n")
				a.log.Info("dev ready", "kafka", b.Addrs()[0], "api", addr, "startup", time.Since(start).Round(time.Millisecond))
				if withSim {
					ds := devSim{a: a, sf: &sf, w: workload, url: "http://" + addr, brokers: b.Addrs()[0], via: simVia, keep: !simExit,
						log: &replay.KafkaLog{Client: conn, Names: a.names()}, rejects: rejects.For(metrics)}
					go func() { simDone <- ds.run(ctx, stop) }()
				}
			}}
			if err := r.run(ctx); err != nil {
				return err
			}
			select {
			case err := <-simDone:
				return err
			default: // stopped before the fleet was done (Ctrl-C, --exit-after)
				return nil
			}
		},
	}
	cmd.Flags().IntVar(&port, "kafka-port", defaultDevKafkaPort, "port of the embedded broker on 127.0.0.1 (0: any free port)")
	cmd.Flags().DurationVar(&exitAfter, "exit-after", 0, "stop after this long (0: run until interrupted); for scripted demos")
	cmd.Flags().BoolVar(&withSim, "sim", false, "also run a simulated fleet (2 prefill + 2 decode vLLM-like engines) against the router and print a report")
	cmd.Flags().BoolVar(&simExit, "sim-exit", false, "with --sim: stop dev after the report and the outcome check (otherwise the idle fleet keeps serving); exit status 1 when the run failed or a request's outcome is missing")
	cmd.Flags().StringVar(&simVia, "sim-via", simViaDoor, "with --sim: how the workload reaches the engines: door (streaming OpenAI completions through the router's front door at http://<http-addr>/v1) or route (POST /v1/route, the engines obey)")
	rf.bindFlags(cmd.Flags())
	inf.bindFlags(cmd.Flags())
	sf.bind(cmd.Flags(), "sim-")
	return cmd
}

// The values of --sim-via.
const (
	simViaRoute = "route"
	simViaDoor  = "door"
)

// devSim is dev's simulated fleet, driven through the router's API: its
// engines publish real ZMQ KV events that ingest picks up from their
// registrations, and the workload goes through the router's OpenAI door (via
// door) or POST /v1/route (via route).
type devSim struct {
	a   *app
	sf  *simFlags
	w   *sim.Workload
	url string
	// brokers is the dev broker's address, for the commands printed to try next.
	brokers string
	via     string
	keep    bool
	// log reads the dev broker, for the outcome check.
	log *replay.KafkaLog
	// rejects is the replica's pdrouter_rejected_total, where the engines
	// count what their API refuses (entry sim_http).
	rejects *rejects.Counter
}

// outcomeWait bounds the wait for the last outcomes after the report: the
// door appends a request's outcome once the client has its answer.
const outcomeWait = 15 * time.Second

// run runs the fleet, prints its report, then checks that every request's
// outcome reached the outcomes topic and joins its decision in an export.
// Without keep it stops dev after the check; its error (the run failed, an
// outcome is missing) is then dev's.
func (d *devSim) run(ctx context.Context, stop func()) (err error) {
	defer func() {
		if err != nil {
			d.a.log.Error("sim", "err", err)
		}
		if !d.keep {
			stop()
		}
	}()
	cfg, err := d.sf.runConfig(d.url)
	if err != nil {
		return err
	}
	cfg.KeepServing = d.keep
	if d.via == simViaDoor {
		cfg.OpenAIBaseURL = d.url + "/v1"
	}
	onReady := func(regs []sim.WorkerRegistration) {
		for _, r := range regs {
			fmt.Fprintf(d.a.stdout, "  sim engine %-10s OpenAI API %s/v1   metrics %s\n", r.WorkerID, r.HTTPURL, r.MetricsURL)
		}
	}
	start := time.Now()
	// The check runs beside the idle fleet, which keeps serving meanwhile.
	checked := make(chan error, 1)
	onReport := func(r *sim.Report) {
		r.Format(d.a.stdout)
		src := *d.log
		src.Window = replay.Window{From: start}
		go func() { checked <- d.check(ctx, &src, r) }()
	}
	_, err = sim.RunFleet(ctx, cfg, d.w, sim.RunDeps{Log: d.a.log, OnReady: onReady, OnReport: onReport, Rejects: d.rejects})
	if ctx.Err() != nil && d.keep {
		return nil // Ctrl-C
	}
	if err != nil {
		return err
	}
	select {
	case err = <-checked:
		return err
	case <-ctx.Done():
		return nil
	}
}

// check prints how many of the run's requests have their outcome joined to
// their decision; a missing one is an error.
func (d *devSim) check(ctx context.Context, src *replay.KafkaLog, r *sim.Report) error {
	err := reportOutcomes(ctx, d.a.stdout, src, r.Requests, r.Decisions, outcomeWait)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	if d.keep {
		d.printNext(r.Decisions)
	}
	return nil
}

// printNext tells a newcomer what to try on the stack that keeps serving: the
// API's URLs and one decision of the run to look at and explain.
func (d *devSim) printNext(decisions []string) {
	bin := os.Args[0] // as the user ran it: ./bin/pdrouter under make run
	w := d.a.stdout
	fmt.Fprintf(w, "\ntry next (the fleet keeps serving, quietly; Ctrl-C stops it):\n")
	fmt.Fprintf(w, "  curl -s %s/v1/workers                    the fleet: load, KV blocks, health of each worker\n", d.url)
	fmt.Fprintf(w, "  curl -s %s/metrics | grep ^pdrouter_     the router's metrics\n", d.url)
	fmt.Fprintf(w, "  curl -s %s/v1/chat/completions -H content-type:application/json -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":8}'\n",
		d.url, d.sf.fleet().Hardware.ModelName)
	var id string
	for _, x := range decisions {
		if x != "" {
			id = x
			break
		}
	}
	if id != "" {
		fmt.Fprintf(w, "  curl -s %s/v1/decisions/%s     one decision as recorded\n", d.url, id)
		fmt.Fprintf(w, "  %s explain %s --brokers %s     why it went where it did, recomputed\n", bin, id, d.brokers)
	}
	fmt.Fprintf(w, "  %s log tail decisions --brokers %s --json --from-offset -3\n", bin, d.brokers)
}
