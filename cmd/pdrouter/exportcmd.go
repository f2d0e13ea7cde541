package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/replay"
)

// newExportCmd is `pdrouter export decisions|outcomes`: the decision log as
// analytics tables (replay/EXPORT.md).
func newExportCmd(a *app) *cobra.Command {
	var (
		wf        windowFlags
		format    string
		out       string
		join      bool
		joinSlack time.Duration
		check     string
		checkWait time.Duration
	)
	cmd := &cobra.Command{
		Use:       "export decisions|outcomes|trace",
		Short:     "Export decisions or outcomes as Parquet or JSON lines for analytics",
		ValidArgs: []string{"decisions", "outcomes"},
		Long: `export writes a window of the decisions or outcomes topic as a flat,
versioned table (the schema is documented in replay/EXPORT.md; every row has
schema_version): one row per decision with its candidate table as a nested
list column, or one row per outcome event. With --join-outcomes each
decision row also gets its request's outcome (TTFT, ITL, output tokens,
completed or cancelled), joined on request_id.

The file is written to --out (default <table>.<format>) through a temporary
name and renamed when complete; "-" writes to standard output.

With --check-outcomes FILE (decision ids, one a line) it writes no table: it
checks that every one of those decisions has a terminal outcome (completed or
cancelled) joined to it, exports the decisions again until none is missing or
--check-outcomes-wait has passed, prints "N of N requests have their outcome
joined to their decision (0 missing)" as pdrouter dev does, and exits with
status 1 when one is missing.`,
		Args: cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			table := args[0]
			f, err := replay.ParseFormat(format)
			if err != nil {
				return err
			}
			if join && table != "decisions" {
				return fmt.Errorf("--join-outcomes applies to `export decisions`")
			}
			if check != "" && table != "decisions" {
				return fmt.Errorf("--check-outcomes applies to `export decisions`")
			}
			var ids []string
			if check != "" {
				if ids, err = readDecisionIDs(check); err != nil {
					return err
				}
			}
			src, err := wf.kafkaLog(a, "export")
			if err != nil {
				return err
			}
			if check != "" {
				return reportOutcomes(cmd.Context(), a.stdout, src, len(ids), ids, checkWait)
			}
			if out == "" {
				out = table + "." + string(f)
			}
			o := replay.ExportOptions{Format: f, JoinOutcomes: join, JoinSlack: joinSlack, Logger: a.log}
			start := time.Now()
			var st replay.ExportStats
			err = writeAtomically(out, a.stdout, func(w io.Writer) error {
				var err error
				if table == "decisions" {
					st, err = replay.ExportDecisions(cmd.Context(), src, w, o)
				} else {
					st, err = replay.ExportOutcomes(cmd.Context(), src, w, o)
				}
				return err
			})
			if err != nil {
				return err
			}
			a.log.Info("export done", "table", table, "format", f, "out", out, "rows", st.Rows, "joined", st.Joined,
				"outcomes_read", st.Outcomes, "schema_version", replay.ExportSchemaVersion, "took", time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	cmd.AddCommand(newExportTraceCmd(a))
	wf.bind(cmd, false)
	fl := cmd.Flags()
	fl.StringVar(&format, "format", "parquet", "parquet or jsonl")
	fl.StringVar(&out, "out", "", `output file (default <table>.<format>; "-" for standard output)`)
	fl.BoolVar(&join, "join-outcomes", false, "add each decision's outcome columns, joined on request_id")
	fl.DurationVar(&joinSlack, "join-slack", 15*time.Minute, "read outcomes this long past --to, for requests that finish after the window")
	fl.StringVar(&check, "check-outcomes", "", "write no table: check that each decision id in this file (one a line) has its outcome joined; exit status 1 when one is missing")
	fl.DurationVar(&checkWait, "check-outcomes-wait", 15*time.Second, "with --check-outcomes: how long to wait for the last outcomes")
	return cmd
}

// writeAtomically writes to path through path+".part", renamed when fn
// succeeds, so a failed or interrupted export never leaves a file that
// looks complete. "-" writes to stdout.
func writeAtomically(path string, stdout io.Writer, fn func(io.Writer) error) error {
	if path == "-" {
		return fn(stdout)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	part := path + ".part"
	f, err := os.Create(part)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		os.Remove(part)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(part)
		return err
	}
	return os.Rename(part, path)
}
