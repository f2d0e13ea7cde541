package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/ingest/ingestbench"
	"github.com/pdrouter/pdrouter/internal/benchtable"
)

// newBenchIngestCmd is `pdrouter bench ingest`: ingest's throughput from an
// engine publisher over ZMQ into a broker.
func newBenchIngestCmd(a *app) *cobra.Command {
	var cfg ingestbench.Config
	cmd := &cobra.Command{
		Use:   "ingest",
		Short: "Measure ingest's throughput from a ZMQ publisher into Kafka, and its CPU",
		Long: `ingest runs an ingest pipeline in this process (the code of 'pdrouter
ingest') with one engine source, and an engine publisher in a separate
process (this binary, re-executed as 'bench ingest-publisher': a ZMTP PUB
written through a buffer, as libzmq writes a busy socket). The publisher
sends --events one-block BlockStored events in vLLM's wire format,
--events-per-message to a ZMQ message, and the run is timed until Kafka
acknowledged every record. A run that lost an event (a reset other than
ingest's first contact, a gap, a missing record) fails the command.

The table gives events/s against ingest's bar (≥ 200k one-block
events/s at one event per message, into the real broker), this process's
CPU (getrusage self: ingest and its Kafka client) and the publisher's,
then the same for --batched events per message (report only; 0 skips it).

Topics go under a fresh prefix on --brokers (a real Kafka, migrated with
replication factor 1) and are deleted afterwards; without --brokers an
in-process kfake is used, and the rows say so: its figures are not Kafka's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Events < 1 || cfg.EventsPerMessage < 1 || cfg.Batched < 0 {
				return errors.New("need --events ≥ 1, --events-per-message ≥ 1, --batched ≥ 0")
			}
			if len(a.kafka.Brokers) > 0 {
				opts, err := a.kafkaOpts("bench-ingest")
				if err != nil {
					return err
				}
				cfg.Brokers, cfg.ClientOpts = a.kafka.Brokers, opts
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("bench ingest: finding this binary to run the publisher: %w", err)
			}
			// Every flag of the child is given, so no PDR_ variable of this
			// environment changes what it does.
			cfg.PublisherCommand = func(w ingestbench.Workload) *exec.Cmd {
				return exec.Command(self, "bench", "ingest-publisher", "--listen", "127.0.0.1:0",
					"--events-per-message", strconv.Itoa(w.EventsPerMessage), "--messages", strconv.Itoa(w.Messages),
					"--log-level", a.logLevel, "--log-format", a.logFormat)
			}
			cfg.Log = a.log
			res, err := ingestbench.Run(cmd.Context(), cfg, a.stdout)
			if err != nil {
				return err
			}
			if err := benchtable.Missed(res); err != nil {
				return fmt.Errorf("bench ingest: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Events, "events", 1_000_000, "one-block events of each run")
	f.IntVar(&cfg.EventsPerMessage, "events-per-message", 1, "events per ZMQ message of the run held to the bar")
	f.IntVar(&cfg.Batched, "batched", 32, "events per ZMQ message of a second, report-only run (0: none)")
	f.IntVar(&cfg.QueueSize, "ingest-queue", 1024, "messages buffered per ZMQ socket, as 'pdrouter ingest --ingest-queue'")
	f.DurationVar(&cfg.StallTimeout, "stall-timeout", 0, "fail a run after this long without an acknowledged record (0: 30s)")
	return cmd
}

// newBenchIngestPublisherCmd is the publisher process of `bench ingest`;
// hidden, because only `bench ingest` runs it (it speaks a line protocol
// with its parent on stdin and stdout).
func newBenchIngestPublisherCmd(a *app) *cobra.Command {
	var cfg ingestbench.PublisherConfig
	cmd := &cobra.Command{
		Use:    "ingest-publisher",
		Short:  "The engine publisher process of 'bench ingest'",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ingestbench.ServePublisher(cmd.Context(), cfg, cmd.InOrStdin(), a.stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:0", "TCP address to bind the PUB on")
	f.IntVar(&cfg.EventsPerMessage, "events-per-message", 1, "one-block events per ZMQ message")
	f.IntVar(&cfg.Messages, "messages", 1000, "messages to send (seqs 0..messages-1)")
	return cmd
}
