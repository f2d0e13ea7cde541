package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/replay"
)

// windowFlags select a window of the decision log, from Kafka or from an
// export file; whatif, tune and export share them.
type windowFlags struct {
	from, to string
	input    string
	progress time.Duration
}

func (w *windowFlags) bind(cmd *cobra.Command, withInput bool) {
	f := cmd.Flags()
	f.StringVar(&w.from, "from", "", "first event time: RFC 3339, Unix milliseconds, or -DURATION before now (-2h); default the start of the log")
	f.StringVar(&w.to, "to", "", "end event time (exclusive), same forms; default the end of the log when the command starts")
	if withInput {
		f.StringVar(&w.input, "input", "", "read decisions from this `pdrouter export decisions` file (.parquet or .jsonl) instead of Kafka")
	}
	f.DurationVar(&w.progress, "progress-every", 5*time.Second, "log progress of long reads this often")
}

func (w *windowFlags) window() (replay.Window, error) {
	now := time.Now()
	from, err := replay.ParseTime(w.from, now)
	if err != nil {
		return replay.Window{}, fmt.Errorf("--from %w", err)
	}
	to, err := replay.ParseTime(w.to, now)
	if err != nil {
		return replay.Window{}, fmt.Errorf("--to %w", err)
	}
	if !from.IsZero() && !to.IsZero() && !from.Before(to) {
		return replay.Window{}, fmt.Errorf("--from %s is not before --to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	return replay.Window{From: from, To: to}, nil
}

// kafkaLog is the window on the brokers of the common flags.
func (w *windowFlags) kafkaLog(a *app, cmdName string) (*replay.KafkaLog, error) {
	win, err := w.window()
	if err != nil {
		return nil, err
	}
	if a.kafka.Embedded() {
		return nil, fmt.Errorf("%s reads the decision log: give --brokers (PDR_BROKERS), or --input with an export file", cmdName)
	}
	conn, err := a.kafkaOpts("whatif")
	if err != nil {
		return nil, err
	}
	return &replay.KafkaLog{Client: conn, Names: a.names(), Window: win, Logger: a.log, ProgressEvery: w.progress}, nil
}

// source is the export file of --input, or the Kafka window.
func (w *windowFlags) source(a *app, cmdName string) (replay.DecisionSource, error) {
	if w.input != "" {
		win, err := w.window()
		if err != nil {
			return nil, err
		}
		return &replay.ExportFile{Path: w.input, Window: win}, nil
	}
	return w.kafkaLog(a, cmdName)
}

// newWhatifCmd is `pdrouter whatif`: replay a window of decisions under
// another disaggregation config.
func newWhatifCmd(a *app) *cobra.Command {
	var (
		wf       windowFlags
		config   string
		enable   bool
		asJSON   bool
		examples int
	)
	cmd := &cobra.Command{
		Use:   "whatif --config '<json>'",
		Short: "Replay a window of decisions under another disaggregation config: flips, reasons, load shift",
		Long: `whatif recomputes every decision of a window from its own record (the
candidate table it was decided on) under an alternative
--router-conditional-disagg-config, and reports how many decisions flip
between local and remote prefill, in each direction and by reason code, the
effective-ISL distribution of the flipped requests, and the prefill tokens
that move between the decode and prefill pools.

--config takes the same JSON as --router-conditional-disagg-config (keys
left out take their defaults); every other router setting stays each
record's own. The worker choice does not depend on the policy, so the mode
flips are exact; the load shift is first order (it does not model how later
decisions would have changed on the state the flips would have made).

Reads the decisions topic (--from/--to select by decision time) or an
export file (--input).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config == "" && !cmd.Flags().Changed("conditional-disagg") {
				return fmt.Errorf("give --config '<json>' (a --router-conditional-disagg-config value) or --conditional-disagg")
			}
			src, err := wf.source(a, "whatif")
			if err != nil {
				return err
			}
			o := replay.WhatIfOptions{Disagg: []byte(config), Examples: examples, Logger: a.log}
			if cmd.Flags().Changed("conditional-disagg") {
				o.Enable = &enable
			}
			rep, err := replay.WhatIf(cmd.Context(), src, o)
			if err != nil {
				return err
			}
			return writeReport(a.stdout, rep, asJSON)
		},
	}
	wf.bind(cmd, true)
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "the alternative --router-conditional-disagg-config JSON")
	f.BoolVar(&enable, "conditional-disagg", true, "also set --router-conditional-disagg (only when given)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.IntVar(&examples, "examples", 10, "list this many flipped decisions")
	return cmd
}
