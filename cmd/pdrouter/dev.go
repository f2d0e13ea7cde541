package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/kafkaconn"
	"github.com/pdrouter/pdrouter/kafkaconn/devbroker"
	"github.com/pdrouter/pdrouter/migrations"
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
			conn := append([]kgo.Opt{kgo.SeedBrokers(b.Addrs()...)}, kafkaconn.ClientOpts("dev", a.log)...)
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
			r := &routerRun{a: a, f: &rf, connOpts: conn, ingestCfg: &icfg, listening: func(addr string) {
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
					go runDevSim(ctx, a, &sf, workload, "http://"+addr, simVia, !simExit, stop)
				}
			}}
			return r.run(ctx)
		},
	}
	cmd.Flags().IntVar(&port, "kafka-port", defaultDevKafkaPort, "port of the embedded broker on 127.0.0.1 (0: any free port)")
	cmd.Flags().DurationVar(&exitAfter, "exit-after", 0, "stop after this long (0: run until interrupted); for scripted demos")
	cmd.Flags().BoolVar(&withSim, "sim", false, "also run a simulated fleet (2 prefill + 2 decode vLLM-like engines) against the router and print a report")
	cmd.Flags().BoolVar(&simExit, "sim-exit", false, "with --sim: stop dev after the report (otherwise the idle fleet keeps serving)")
	cmd.Flags().StringVar(&simVia, "sim-via", simViaRoute, "with --sim: how the workload reaches the engines: route (POST /v1/route, the engines obey) or door (streaming OpenAI completions at http://<http-addr>/v1)")
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

// runDevSim drives the simulated fleet through the router's API: its engines
// publish real ZMQ KV events that ingest picks up from their registrations, and
// the workload goes through POST /v1/route (via route) or the router's OpenAI
// door (via door).
func runDevSim(ctx context.Context, a *app, sf *simFlags, w *sim.Workload, url, via string, keep bool, stop func()) {
	cfg, err := sf.runConfig(url)
	if err != nil {
		a.log.Error("sim", "err", err)
		stop()
		return
	}
	cfg.KeepServing = keep
	if via == simViaDoor {
		cfg.OpenAIBaseURL = url + "/v1"
	}
	onReady := func(regs []sim.WorkerRegistration) {
		for _, r := range regs {
			fmt.Fprintf(a.stdout, "  sim engine %-10s OpenAI API %s/v1   metrics %s\n", r.WorkerID, r.HTTPURL, r.MetricsURL)
		}
	}
	_, err = sim.RunFleet(ctx, cfg, w, sim.RunDeps{Log: a.log, OnReady: onReady, OnReport: func(r *sim.Report) { r.Format(a.stdout) }})
	if err != nil && ctx.Err() == nil {
		a.log.Error("sim", "err", err)
	}
	if !keep {
		stop()
	}
}
