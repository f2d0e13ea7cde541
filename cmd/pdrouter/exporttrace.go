package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/replay"
	"github.com/pdrouter/pdrouter/sim"
)

// newExportTraceCmd is `pdrouter export trace`: a window of the decision log as a
// Mooncake JSONL trace, for `pdrouter plan` and `pdrouter sim`.
func newExportTraceCmd(a *app) *cobra.Command {
	var (
		wf          windowFlags
		out         string
		joinSlack   time.Duration
		defOutput   int
		maxRequests int
	)
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Export a window of the decision log as a Mooncake JSONL trace",
		Long: `trace writes the window's requests as a Mooncake JSONL trace, one line per request
in decision order, which ` + "`pdrouter plan`" + ` and ` + "`pdrouter sim --trace`" + ` replay:

  timestamp      ms from the window's first decision (decided_at, not the wall clock)
  input_length   the decision's prompt_tokens
  output_length  the output tokens of the request's terminal outcome (completed or
                 cancelled, read up to --join-slack past --to); a request without
                 one is skipped and counted, or given --default-output-tokens
  hash_ids       the prompt in 512-token segments, each named by the router hash of
                 the last complete block that ends inside it, as dense ints in
                 first-seen order: requests share id k iff they share the prompt
                 through segment k (at a block size dividing 512, as vLLM's 16)

The ids stop where the recorded chain stops (a record cut to its size budget), and
the reader gives the rest of the prompt to that request alone. A request id decided
twice (replicas raced) keeps its earliest decision. The same window gives the same
bytes. The file is written through a temporary name; "-" writes to standard output.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if defOutput < 0 || defOutput >= sim.MaxMooncakeContext {
				return fmt.Errorf("--default-output-tokens %d: want 0 (skip) to %d", defOutput, sim.MaxMooncakeContext-1)
			}
			if maxRequests < 1 || maxRequests > sim.MaxMooncakeRequests {
				return fmt.Errorf("--max-requests %d: want 1 to %d (the trace reader's bound)", maxRequests, sim.MaxMooncakeRequests)
			}
			src, err := wf.kafkaLog(a, "export trace")
			if err != nil {
				return err
			}
			o := replay.TraceOptions{SegmentTokens: sim.MooncakeBlockTokens, MaxRequests: maxRequests,
				MaxContext: sim.MaxMooncakeContext, DefaultOutputTokens: defOutput, JoinSlack: joinSlack}
			start := time.Now()
			var st replay.TraceStats
			err = writeAtomically(out, a.stdout, func(w io.Writer) error {
				var err error
				st, err = replay.ExportTrace(cmd.Context(), src, w, o)
				return err
			})
			if err != nil {
				return err
			}
			a.log.Info("export trace done", "out", out, "requests", st.Written, "decisions", st.Decisions, "duplicates", st.Duplicates,
				"no_output", st.NoOutput, "empty_prompt", st.EmptyPrompt, "too_long", st.TooLong, "cut_chains", st.CutChains,
				"outcomes_read", st.Outcomes, "took", time.Since(start).Round(time.Millisecond))
			if out != "-" {
				verb := "skipped"
				if defOutput > 0 {
					verb = fmt.Sprintf("given %d output tokens", defOutput)
				}
				fmt.Fprintf(a.stdout, "wrote %s: %d requests of %d decisions; %d without output tokens %s, %d duplicate decisions, %d empty prompts and %d past the context dropped, %d with a cut hash chain\n",
					out, st.Written, st.Decisions, st.NoOutput, verb, st.Duplicates, st.EmptyPrompt, st.TooLong, st.CutChains)
			}
			return nil
		},
	}
	wf.bind(cmd, false)
	fl := cmd.Flags()
	fl.StringVar(&out, "out", "trace.jsonl", `output file ("-" for standard output)`)
	fl.DurationVar(&joinSlack, "join-slack", 15*time.Minute, "read outcomes this long past --to, for requests that finish after the window")
	fl.IntVar(&defOutput, "default-output-tokens", 0, "output_length of a request whose outcome reported no output tokens; 0: skip it (counted)")
	fl.IntVar(&maxRequests, "max-requests", sim.MaxMooncakeRequests, "refuse a window of more requests than this (the trace reader's bound)")
	return cmd
}
