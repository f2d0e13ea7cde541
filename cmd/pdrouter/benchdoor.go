package main

import (
	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/door/doorbench"
	"github.com/pdrouter/pdrouter/door/doortest"
	"github.com/pdrouter/pdrouter/internal/benchtable"
)

// newBenchDoorCmd is `pdrouter bench door`: what the OpenAI front door adds
// to TTFT, against calling the engines directly.
func newBenchDoorCmd(a *app) *cobra.Command {
	cfg := doorbench.Config{Streams: 64, Requests: 2000, Workers: 4}
	cmd := &cobra.Command{
		Use:   "door",
		Short: "Measure what the OpenAI front door adds to TTFT at p50 and p99",
		Long: `door starts --workers in-process OpenAI engines and a door in front of them
(an in-memory decider picking the engines in turn, so the durable decision
append, which ` + "`bench api`" + ` measures, is left out), then sends --requests
streamed completions from --streams concurrent clients to the engines
directly and the same through the door, and prints the TTFT p50 and p99 of
both and their differences: the door's own cost (parsing, forwarding,
relaying the stream, measuring).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Start = func(id string) (doorbench.Upstream, error) { return doortest.Start(id), nil }
			_, rows, err := doorbench.Run(cmd.Context(), cfg, a.stdout)
			if err != nil {
				return err
			}
			return benchtable.Missed(rows)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Streams, "streams", cfg.Streams, "concurrent streaming clients")
	f.IntVar(&cfg.Requests, "requests", cfg.Requests, "requests per mode (direct, through the door)")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "engines")
	f.DurationVar(&cfg.MaxAddedP99, "max-added-p99", 0, "fail when the door adds more than this to TTFT at p99 (0: report only)")
	return cmd
}
