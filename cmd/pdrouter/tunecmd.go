package main

import (
	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/replay"
)

// newTuneCmd is `pdrouter tune`: threshold guidance from the decision log.
func newTuneCmd(a *app) *cobra.Command {
	var (
		wf     windowFlags
		target float64
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "tune [--target-local F]",
		Short: "Recommend conditional-disaggregation thresholds for a target local-prefill share",
		Long: `tune reads the decisions of a window and prints the percentiles of the
effective ISL and of the effective-to-raw ratio, then candidate
--router-conditional-disagg-config values with the share of requests each
would send to local prefill. Each share is computed by recomputing every
decision of the window under that config, not estimated from percentiles.
The recommendation is the candidate closest to --target-local; when no
thresholds can reach it (requests with nothing cached never pass the strict
ratio check), tune says so and why.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			src, err := wf.source(a, "tune")
			if err != nil {
				return err
			}
			rep, err := replay.Tune(cmd.Context(), src, replay.TuneOptions{TargetLocal: target, Logger: a.log})
			if err != nil {
				return err
			}
			return writeReport(a.stdout, rep, asJSON)
		},
	}
	wf.bind(cmd, true)
	cmd.Flags().Float64Var(&target, "target-local", 0.5, "wanted share of requests prefilled locally, in [0, 1]")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
