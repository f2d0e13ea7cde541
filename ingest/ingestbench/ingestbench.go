// Package ingestbench measures ingest against its throughput bar: at least
// 200k one-block events/s from an engine's ZMQ publisher into the real
// broker through one ingest process, with the CPU that costs. `pdrouter
// bench ingest` prints its table; TestBenchZMQToKafka (ingest) runs it
// with other publishers.
//
// A run is what production runs: ingest.New with one source, the idempotent
// acks=all Kafka sink, fresh topics migrated as `pdrouter migrate` would.
// The engine publisher runs in its own process (publisher.go), so the CPU
// reported for ingest is ingest's own. A run is timed from the publisher's
// first send until Kafka acknowledged every record, and counts only if
// ingest's metrics show that nothing was lost (delivery.go); otherwise Run
// fails rather than print a figure.
package ingestbench

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"time"

	"github.com/pdrouter/pdrouter/internal/benchtable"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Config sizes a run. Zero fields take the defaults.
type Config struct {
	// Events is the one-block events of each run; default 1,000,000.
	Events int
	// EventsPerMessage is the events per ZMQ message of the first run;
	// default 1, the case the bar of ≥ 200k events/s is for.
	EventsPerMessage int
	// Batched is the events per message of a second, report-only run
	// (engines batch the events of a scheduler step); 0: no second run.
	Batched int
	// Brokers to write to; empty: an in-process kfake, labelled as such.
	Brokers    []string
	ClientOpts []kgo.Opt
	// PublisherCommand builds the publisher process of a run: a program
	// speaking the protocol of publisher.go, such as `pdrouter bench
	// ingest-publisher`. Nil runs the publisher in this process (its CPU
	// is then counted with ingest's, and the table says so).
	PublisherCommand func(Workload) *exec.Cmd
	// QueueSize is ingest's per-socket queue (0: ingest's default, that of
	// `pdrouter ingest`).
	QueueSize int
	// StallTimeout is how long a run may go without a record acknowledged
	// (or without ingest subscribing) before it is failed; default 30s.
	StallTimeout time.Duration
	Log          *slog.Logger
}

func (c *Config) defaults() {
	if c.Events <= 0 {
		c.Events = 1_000_000
	}
	if c.EventsPerMessage <= 0 {
		c.EventsPerMessage = 1
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = 30 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// workloads are the runs of cfg: the one held to the bar, then the batched
// one.
func (c *Config) workloads() []Workload {
	ws := []Workload{{EventsPerMessage: c.EventsPerMessage, Messages: max(1, c.Events/c.EventsPerMessage)}}
	if c.Batched > 0 {
		ws = append(ws, Workload{EventsPerMessage: c.Batched, Messages: max(1, c.Events/c.Batched)})
	}
	return ws
}

// Result is one row of the table.
type Result = benchtable.Row

// Run runs every measurement and writes the table to out. An error means
// no figure could be trusted: events were lost, or something failed.
func Run(ctx context.Context, cfg Config, out io.Writer) ([]Result, error) {
	cfg.defaults()
	b, err := openBroker(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer b.close()
	var res []Result
	for _, w := range cfg.workloads() {
		cfg.Log.Info("bench ingest: run", "events", w.Events(), "events_per_message", w.EventsPerMessage, "messages", w.Messages,
			"publisher", map[bool]string{true: "own process", false: "this process"}[cfg.PublisherCommand != nil])
		m, err := measure(ctx, cfg, b, w)
		if err != nil {
			return nil, err
		}
		for _, r := range m.rows(b.label) {
			cfg.Log.Info("bench ingest", "measure", r.Measure, "value", r.Value, "verdict", r.Verdict)
			res = append(res, r)
		}
	}
	benchtable.Print(out, res)
	return res, nil
}
