package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/api/loadgen"
	"github.com/pdrouter/pdrouter/migrations"
)

// newBenchAPICmd is `pdrouter bench api`: the decision service under load,
// end to end, with durable audit on a real broker.
func newBenchAPICmd(a *app) *cobra.Command {
	cfg := loadgen.Config{DecodeWorkers: 128, PrefillWorkers: 32, BlockSize: 16, MinTokens: 1024, MaxTokens: 32768,
		SharedPrefixes: 16, Clients: 64, Duration: 20 * time.Second, Warmup: 3 * time.Second, Seed: 1}
	var rf routerFlags
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Load the decision API and print throughput and latency percentiles",
		Long: `api registers a fleet (128 decode and 32 prefill workers by default), warms
their caches with shared prefixes, then runs --clients closed-loop clients
sending POST /v1/route with prompts of --min-tokens to --max-tokens tokens
for --duration, and prints decisions/s and latency p50/p99/p99.9 of the
whole request: HTTP, decision and durable append to the decisions topic.
It also reports the run in 5-second windows (rate and p99 of each in the
progress log; the slowest and fastest in the table), so a rate that does
not hold shows. Request ids are bench-<run>-<n>, new in every run: an
answer that replays an earlier decision (an id seen before) is counted
apart and never as a decision.

With --router it loads a running router. Without it, it starts a router
replica in this process on --brokers (a real Kafka; topics under a fresh
prefix, migrated with replication factor 1), which is what the bar of 5,000
decisions/s with p99 ≤ 10 ms refers to; CPU is then the whole process's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.MinTokens < 1 || cfg.MaxTokens < cfg.MinTokens || cfg.Clients < 1 || cfg.DecodeWorkers < 1 || cfg.SharedPrefixes < 1 || cfg.InFlight < 0 {
				return errors.New("need 1 ≤ --min-tokens ≤ --max-tokens, --clients ≥ 1, --decode-workers ≥ 1, --shared-prefixes ≥ 1, --in-flight ≥ 0")
			}
			cfg.Log = a.log
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			inProcess := cfg.URL == ""
			if inProcess {
				url, cleanup, err := startBenchRouter(ctx, a, &rf)
				if err != nil {
					return err
				}
				defer cleanup()
				cfg.URL = url
			}
			res, err := loadgen.Run(ctx, cfg)
			if err != nil {
				return err
			}
			printBenchAPI(a, cfg, res, inProcess)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.URL, "router", "", "URL of a running router (default: start one in this process on --brokers)")
	f.IntVar(&cfg.DecodeWorkers, "decode-workers", cfg.DecodeWorkers, "decode workers to register")
	f.IntVar(&cfg.PrefillWorkers, "prefill-workers", cfg.PrefillWorkers, "prefill workers to register")
	f.IntVar(&cfg.MinTokens, "min-tokens", cfg.MinTokens, "shortest prompt, in tokens")
	f.IntVar(&cfg.MaxTokens, "max-tokens", cfg.MaxTokens, "longest prompt, in tokens")
	f.IntVar(&cfg.SharedPrefixes, "shared-prefixes", cfg.SharedPrefixes, "distinct shared prompt prefixes (cache warm on some workers)")
	f.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent closed-loop clients")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured time")
	f.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured time before it")
	f.BoolVar(&cfg.Hashes, "block-hashes", true, "send precomputed block_hashes (as a gateway would) instead of token_ids")
	f.IntVar(&cfg.InFlight, "in-flight", 8, "routed requests each client keeps running before it reports the oldest completed (0: never, and the router's active accounting only grows)")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the generated prompts")
	rf.bindFlags(f)
	return cmd
}

// startBenchRouter runs a router replica in this process on fresh topics.
// The returned cleanup stops it and deletes its topics and store; the
// caller runs it before returning, so a run leaves nothing behind.
func startBenchRouter(ctx context.Context, a *app, rf *routerFlags) (string, func(), error) {
	if a.kafka.Embedded() {
		return "", nil, errors.New("bench api needs --router, or --brokers to start a router on")
	}
	opts, err := a.kafkaOpts("bench-api")
	if err != nil {
		return "", nil, err
	}
	a.topicPrefix = fmt.Sprintf("bench-%d.", time.Now().UnixNano())
	dir, err := mkdirTempUnder(a.dataDir + "/bench")
	if err != nil {
		return "", nil, err
	}
	a.dataDir = dir
	specs, err := migrations.Declarations(migrations.SingleNodeOptions(a.topicPrefix))
	if err != nil {
		return "", nil, err
	}
	rctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	cleanup := func() {
		stop()
		select {
		case <-errc:
		case <-time.After(30 * time.Second):
		}
		removeAll(dir)
		deleteBenchTopics(a, opts, specs)
	}
	if _, err := runMigrate(ctx, opts, specs, false); err != nil {
		cleanup()
		return "", nil, err
	}
	a.httpAddr = "127.0.0.1:0"
	ready := make(chan string, 1)
	r := &routerRun{a: a, f: rf, connOpts: opts, listening: func(addr string) { ready <- addr }}
	go func() { errc <- r.run(rctx) }()
	select {
	case addr := <-ready:
		return "http://" + addr, cleanup, nil
	case err := <-errc:
		errc <- err
		cleanup()
		return "", nil, fmt.Errorf("bench api: router: %w", err)
	}
}

func printBenchAPI(a *app, cfg loadgen.Config, r loadgen.Result, inProcess bool) {
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	where := cfg.URL
	if inProcess {
		where = "in-process router on " + fmt.Sprint(a.kafka.Brokers)
	}
	fmt.Fprintf(w, "bench api\t%s\n", where)
	fmt.Fprintf(w, "fleet\t%d decode + %d prefill workers, block size %d\n", cfg.DecodeWorkers, cfg.PrefillWorkers, cfg.BlockSize)
	fmt.Fprintf(w, "prompts\t%d–%d tokens, sent as %s\n", cfg.MinTokens, cfg.MaxTokens, map[bool]string{true: "block_hashes", false: "token_ids"}[cfg.Hashes])
	fmt.Fprintf(w, "clients\t%d for %s\n", cfg.Clients, r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "decisions\t%d (%d local)\n", r.Requests, r.Local)
	if r.Replays > 0 {
		fmt.Fprintf(w, "replays\t%d answers replayed an earlier decision (request ids reused): not counted\n", r.Replays)
	}
	fmt.Fprintf(w, "errors\t%v\n", r.Errors)
	if cfg.InFlight > 0 {
		fmt.Fprintf(w, "completions\t%d (%d in flight per client; errors %v)\n", r.Completions, cfg.InFlight, r.CompletionErrors)
	} else {
		fmt.Fprintf(w, "completions\tnone (--in-flight 0): active accounting grows through the run\n")
	}
	fmt.Fprintf(w, "throughput\t%.0f decisions/s\t(bar ≥ 5000)\n", r.Throughput)
	fmt.Fprintf(w, "latency p50\t%s\n", r.P50.Round(time.Microsecond))
	fmt.Fprintf(w, "latency p99\t%s\t(bar ≤ 10ms)\n", r.P99.Round(time.Microsecond))
	fmt.Fprintf(w, "latency p99.9\t%s\n", r.P999.Round(time.Microsecond))
	fmt.Fprintf(w, "latency max\t%s\n", r.Max.Round(time.Microsecond))
	if len(r.Windows) > 1 {
		lo, hi := r.Windows[0], r.Windows[0]
		for _, x := range r.Windows {
			if x.Throughput < lo.Throughput {
				lo = x
			}
			if x.Throughput > hi.Throughput {
				hi = x
			}
		}
		fmt.Fprintf(w, "windows\t%d of ~5s: %.0f–%.0f decisions/s, p99 %s–%s (slowest–fastest)\n", len(r.Windows),
			lo.Throughput, hi.Throughput, lo.P99.Round(time.Microsecond), hi.P99.Round(time.Microsecond))
	}
	fmt.Fprintf(w, "cpu\t%.2f cores over the measured time (this process%s)\n", r.CPU.Seconds()/r.Elapsed.Seconds(), map[bool]string{true: ": router and load generator", false: ": load generator only"}[inProcess])
	_ = w.Flush()
	_ = os.Stdout.Sync()
}

// deleteBenchTopics deletes the topics a bench created under its fresh
// prefix, so a run leaves nothing behind on the broker.
func deleteBenchTopics(a *app, opts []kgo.Opt, specs []migrations.TopicSpec) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return
	}
	defer cl.Close()
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	if _, err := kadm.NewClient(cl).DeleteTopics(dctx, names...); err != nil {
		a.log.Warn("bench: deleting the bench topics", "topics", names, "err", err)
	}
}
