package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/internal/benchtable"
	"github.com/pdrouter/pdrouter/statestore/storebench"
)

// newBenchCmd is `pdrouter bench …`: benchmarks that print tables.
func newBenchCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Benchmarks that print tables"}
	var cfg storebench.Config
	store := &cobra.Command{
		Use:   "store",
		Short: "Measure the state store against its bars (apply rate, query latency, memory, bootstrap, replay)",
		Long: `store builds state stores from generated KV events and prints, per measure,
the value, its bar and a verdict: apply rate into Pebble and the
index, the overlap query of a 1,000-block request over 128 workers and 1M
cached entries (p99), hot-index bytes per cached entry, bootstrap from a
snapshot, a full replay, and the end-to-end rate from a broker (--brokers;
without it an in-process kfake, labelled as such). The default sizes finish
in about a minute on 2 cores; --replay-ops 10000000 runs the full-size replay.
Stores go to a temporary directory under --data-dir, removed afterwards.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(a.kafka.Brokers) > 0 {
				opts, err := a.kafkaOpts("bench")
				if err != nil {
					return err
				}
				cfg.Brokers, cfg.ClientOpts = a.kafka.Brokers, opts
			}
			cfg.Log = a.log
			dir, err := mkdirTempUnder(filepath.Join(a.dataDir, "bench"))
			if err != nil {
				return err
			}
			defer removeAll(dir)
			cfg.Dir = dir
			res, err := storebench.Run(cmd.Context(), cfg, a.stdout)
			if err != nil {
				return err
			}
			if err := benchtable.Missed(res); err != nil {
				return fmt.Errorf("bench store: %w", err)
			}
			return nil
		},
	}
	f := store.Flags()
	f.IntVar(&cfg.Workers, "workers", 128, "workers of the generated fleet")
	f.IntVar(&cfg.Entries, "entries", 1_000_000, "cached (block, worker) entries for the query, memory and bootstrap measures")
	f.IntVar(&cfg.Queries, "queries", 20_000, "overlap queries timed")
	f.IntVar(&cfg.ApplyBlockOps, "apply-ops", 2_000_000, "block operations of the apply-rate run")
	f.IntVar(&cfg.ReplayBlockOps, "replay-ops", 2_000_000, "block operations of the replay run (the bar's full size: 10000000)")
	f.IntVar(&cfg.E2EBlockOps, "e2e-ops", 500_000, "block operations produced to the broker and consumed back")
	cmd.AddCommand(store, newBenchAPICmd(a), newBenchScaleCmd(a), newBenchDoorCmd(a), newBenchIngestCmd(a), newBenchIngestPublisherCmd(a), newBenchFloorReplicaCmd(a))
	return cmd
}

func mkdirTempUnder(parent string) (string, error) {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(parent, "store-")
}

func removeAll(dir string) { _ = os.RemoveAll(dir) }
