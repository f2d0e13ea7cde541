package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"

	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/door/doorbench"
	"github.com/pdrouter/pdrouter/door/doortest"
	"github.com/pdrouter/pdrouter/internal/benchtable"
	"github.com/pdrouter/pdrouter/sim"
)

// newBenchDoorCmd is `pdrouter bench door`: what the OpenAI front door adds
// to TTFT, against calling the engines directly.
func newBenchDoorCmd(a *app) *cobra.Command {
	cfg := doorbench.Config{Streams: 64, Requests: 2000, Workers: 4}
	engines, scale, profile, traceFile := "sim", 1.0, "", ""
	cmd := &cobra.Command{
		Use:   "door",
		Short: "Measure what the OpenAI front door adds to TTFT at p50 and p99",
		Long: `door starts --workers simulated decode engines in-process (the engines of
` + "`pdrouter dev --sim`" + `, serving vLLM's OpenAI API on loopback, timed by the
simulator at --time-scale) and a door in front of them (an in-memory decider
picking the engines in turn, so the durable decision append, which ` + "`bench api`" + `
measures, is left out). --streams closed-loop clients, each sending its next
streamed completion when the previous answer has ended, send --requests to
the engines directly and as many through the door, in alternating rounds
(the clients run on from one round into the next). It prints the TTFT p50 and
p99 of both, their differences (the door's own cost: parsing, forwarding,
relaying the stream, measuring) with bootstrap 95% intervals over pairs of
rounds, and the process's CPU time per request in each mode. --aa sends both
modes' rounds directly: the differences it prints are the bench's noise.
--engines doortest uses a minimal in-test engine instead. --memory-limit and
--gc-percent apply as they do to serve, whose door this is: under a memory
limit (a container's, with the default auto) the collector runs at
--gc-percent, and its cycles are part of the p99 measured.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.tuneMemory(); err != nil {
				return err
			}
			switch engines {
			case "sim":
				fc := sim.DefaultFleet()
				fc.Prefill, fc.Decode = 1, cfg.Workers
				es, err := sim.ServeEngines(fc, scale, a.log)
				if err != nil {
					return err
				}
				defer es.Close()
				cfg.Model = es.Model
				cfg.Start = func(id string) (doorbench.Upstream, error) {
					var n int
					if _, err := fmt.Sscanf(id, "bench-%d", &n); err != nil {
						return nil, err
					}
					return simEngine(es.URLs[fmt.Sprintf("decode-%d", n)]), nil
				}
			case "doortest":
				cfg.Start = func(id string) (doorbench.Upstream, error) { return doortest.Start(id), nil }
			default:
				return fmt.Errorf("--engines %q: want sim or doortest", engines)
			}
			if profile != "" {
				pf, err := os.Create(profile)
				if err != nil {
					return err
				}
				defer pf.Close()
				if err := pprof.StartCPUProfile(pf); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if traceFile != "" {
				tf, err := os.Create(traceFile)
				if err != nil {
					return err
				}
				defer tf.Close()
				if err := trace.Start(tf); err != nil {
					return err
				}
				defer trace.Stop()
			}
			_, rows, err := doorbench.Run(cmd.Context(), cfg, a.stdout)
			if err != nil {
				return err
			}
			return benchtable.Missed(rows)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Streams, "streams", cfg.Streams, "concurrent closed-loop streaming clients")
	f.IntVar(&cfg.Requests, "requests", cfg.Requests, "requests per mode (direct, through the door)")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "engines")
	f.IntVar(&cfg.PromptTokens, "prompt-tokens", 1024, "prompt length of every request, in tokens")
	f.IntVar(&cfg.OutputTokens, "output-tokens", 128, "output length of every request, in tokens")
	f.IntVar(&cfg.Rounds, "rounds", 4, "alternating rounds per mode")
	f.StringVar(&engines, "engines", engines, "sim (the simulated engines) or doortest (a minimal in-test engine)")
	f.Float64Var(&scale, "time-scale", scale, "sim engines: simulated seconds per wall second")
	f.StringVar(&profile, "cpuprofile", "", "write a CPU profile of the run (engines, clients and door) to this file")
	f.StringVar(&traceFile, "trace", "", "write a runtime execution trace of the run to this file (go tool trace -pprof=sched on it shows where goroutines waited for a core)")
	f.BoolVar(&cfg.AA, "aa", false, "A/A run: send the door's rounds to the engines directly too, so the differences printed are the bench's noise")
	f.DurationVar(&cfg.MaxAddedP99, "max-added-p99", 0, "fail when the door adds more than this to TTFT at p99 (0: report only)")
	return cmd
}

// simEngine is a simulated engine as the bench's upstream; the fleet closes
// its engines together.
type simEngine string

func (s simEngine) URL() string { return string(s) }
func (simEngine) Close()        {}
