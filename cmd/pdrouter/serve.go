package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newServeCmd(a *app) *cobra.Command {
	var (
		rf      routerFlags
		inf     ingestFlags
		withIng bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a router replica: materializer, decider and API",
		Long: `serve runs one stateless router replica against a real Kafka (--brokers). It
materializes every partition of the topics it reads (kv-events, load,
workers, and load-deltas or, with --load-deltas write or off, decisions and
outcomes, or with snapshots load-shares and its own partition of
load-deltas; only its cell's partitions, with --cell) into its Pebble store
under --data-dir (or bootstraps from a peer's snapshot with
--bootstrap-from), and answers POST /v1/route and the rest of the API on
--http-addr. Every decision is durable on the decisions topic, with its
load delta, before it is answered. /readyz answers 200
once the state is within --ready-lag records of the log. With snapshots, a
lifecycle event for a request this replica did not decide goes to the
forwards topic (202, forwarded), which every replica reads in a consumer
group of its own, and the replica that decided it applies it. With --ingest
it also runs ingest in the same process.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.kafka.Embedded() {
				return errors.New("serve needs --brokers (PDR_BROKERS); for a laptop without Kafka use `pdrouter dev`")
			}
			opts, err := a.kafkaOpts("router")
			if err != nil {
				return err
			}
			r := &routerRun{a: a, f: &rf, connOpts: opts}
			if withIng {
				cfg, err := inf.config(a)
				if err != nil {
					return err
				}
				r.ingestCfg = &cfg
			}
			return r.run(cmd.Context())
		},
	}
	rf.bindFlags(cmd.Flags())
	inf.bindFlags(cmd.Flags())
	cmd.Flags().BoolVar(&withIng, "ingest", false, "also run ingest in this process (the ingest flags apply)")
	return cmd
}
