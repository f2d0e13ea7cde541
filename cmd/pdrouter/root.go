package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/envflags"
	"github.com/pdrouter/pdrouter/internal/logflags"
	"github.com/pdrouter/pdrouter/internal/memlimit"
	"github.com/pdrouter/pdrouter/kafkaconn"
)

// app holds what every command shares: the process environment and output
// streams (passed in, so tests run commands in-process), and the common
// flags of the CLI contract in design.md.
type app struct {
	env    func(string) (string, bool)
	stdout io.Writer
	stderr io.Writer

	kafka       kafkaconn.Config
	topicPrefix string
	dataDir     string
	httpAddr    string
	logLevel    string
	logFormat   string
	// kafkaLogLevel is --kafka-log-level: franz-go's lines are about
	// connections and metadata, which an operator wants only when asked.
	kafkaLogLevel string
	memory        memlimit.Config

	log *slog.Logger
	// kafkaLog is what the Kafka clients log to: log's output, at
	// --kafka-log-level or --log-level, whichever is higher.
	kafkaLog *slog.Logger
}

// exitCode is an error that asks for a specific process exit status.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "pdrouter",
		Short: "Event-sourced router for disaggregated LLM serving",
		Long: `pdrouter picks, for every request, the decode worker with the longest cached
prefix that has room, decides between local prefill and a prefill worker
(conditional disaggregation), and logs the decision as an auditable event.
Its state is materialized from Kafka topics into a per-replica Pebble store.

Every flag also reads an environment variable: --topic-prefix is
PDR_TOPIC_PREFIX. A flag on the command line wins over the environment.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := envflags.Apply(cmd.Flags(), a.env); err != nil {
				return err
			}
			if err := events.ValidatePrefix(a.topicPrefix); err != nil {
				return err
			}
			l, err := logflags.New(a.stderr, a.logLevel, a.logFormat)
			if err != nil {
				return err
			}
			kl, err := logflags.AtLeast(l, "--kafka-log-level", a.kafkaLogLevel)
			if err != nil {
				return err
			}
			a.log, a.kafkaLog = l, kl
			return nil
		},
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	pf := root.PersistentFlags()
	a.kafka.BindFlags(pf)
	pf.StringVar(&a.topicPrefix, "topic-prefix", "", "prefix of every topic name, e.g. 'prod.'")
	pf.StringVar(&a.dataDir, "data-dir", "data", "directory of the Pebble store, the snapshots and the dev broker's log")
	pf.StringVar(&a.httpAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address of the API and /metrics")
	pf.StringVar(&a.logLevel, "log-level", "info", "debug, info, warn or error")
	pf.StringVar(&a.logFormat, "log-format", "text", "text or json")
	pf.StringVar(&a.kafkaLogLevel, "kafka-log-level", "warn", "level of the Kafka client's own log lines (connections, metadata, rebalances): debug, info, warn or error; never below --log-level")
	pf.StringVar(&a.memory.Limit, "memory-limit", "auto", "soft memory limit of the Go runtime for serve, dev, ingest and bench door: auto (90% of the cgroup's memory limit, if any), none, or a size such as 3.5GiB; GOMEMLIMIT wins")
	pf.IntVar(&a.memory.GCPercent, "gc-percent", 400, "Go GC percent while a memory limit is in effect (the runtime's 100 without one); GOGC wins")

	root.AddCommand(newMigrateCmd(a), newLogCmd(a), newDevCmd(a), newServeCmd(a), newIngestCmd(a), newStateCmd(a), newBenchCmd(a), newSimCmd(a), newExplainCmd(a), newWhatifCmd(a), newTuneCmd(a), newExportCmd(a), newPlanCmd(a), newCellCmd(a), newVersionCmd(a))
	// Annotate after every command has registered its flags.
	var annotate func(c *cobra.Command)
	annotate = func(c *cobra.Command) {
		envflags.Annotate(c.LocalNonPersistentFlags())
		envflags.Annotate(c.PersistentFlags())
		for _, s := range c.Commands() {
			annotate(s)
		}
	}
	annotate(root)
	return root
}

func (a *app) names() events.Names { return events.Names{Prefix: a.topicPrefix} }

// tuneMemory applies --memory-limit and --gc-percent (internal/memlimit)
// for a long-running command, and logs what is in effect.
func (a *app) tuneMemory() error {
	r, err := memlimit.Apply(a.memory, memlimit.SystemDeps(a.env))
	if err != nil {
		return err
	}
	a.log.Info("go runtime memory", "limit_bytes", r.Limit, "limit_from", r.LimitFrom, "gc_percent", r.GCPercent, "gc_from", r.GCFrom)
	return nil
}

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and the schemas this build reads and writes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(a.stdout, "pdrouter %s\n", version)
			for _, t := range events.AllTopics {
				fmt.Fprintf(a.stdout, "  %-10s %s\n", t, events.SchemaOf(t))
				for _, side := range events.SideSchemas(t) {
					fmt.Fprintf(a.stdout, "  %-10s %s\n", "", side)
				}
			}
			return nil
		},
	}
}

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

// writeReport prints a replay report (explain, what-if, tune): indented
// JSON with --json, else its text form.
func writeReport(w io.Writer, rep interface{ WriteText(io.Writer) error }, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(w)
}
