package ingestbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/ingest"
)

// Workload is one measured run: Messages ZMQ messages of EventsPerMessage
// one-block events each.
type Workload struct {
	EventsPerMessage int
	Messages         int
}

// Events is the run's total of one-block events.
func (w Workload) Events() int { return w.EventsPerMessage * w.Messages }

// measurement is what one run measured.
type measurement struct {
	Workload
	wall      time.Duration // from the publisher's first send to the last acknowledgement
	ingestCPU time.Duration // this process's CPU over wall
	pubCPU    time.Duration // the publisher process's CPU, its whole life
	pubApart  bool          // false: the publisher ran in this process
}

func (m measurement) eventsPerSecond() float64 { return float64(m.Events()) / m.wall.Seconds() }

// measure runs an ingest (ingest.New, as `pdrouter ingest` does) with one
// source, the publisher of w, and times from the publisher's first send
// until Kafka acknowledged every record. It fails when any event was lost.
func measure(ctx context.Context, cfg Config, b *broker, w Workload) (measurement, error) {
	m := measurement{Workload: w}
	log := cfg.Log.With("events_per_message", w.EventsPerMessage, "messages", w.Messages)
	pub, err := startPublisher(ctx, cfg, w)
	if err != nil {
		return m, err
	}
	defer pub.kill()
	reg := prometheus.NewRegistry()
	ing, err := ingest.New(ingest.Config{
		IngestID:  "bench-ingest",
		Names:     b.names,
		QueueSize: cfg.QueueSize,
		Sources:   []ingest.SourceConfig{{WorkerID: fmt.Sprintf("bench-%d", w.EventsPerMessage), Endpoint: pub.endpoint()}},
	}, ingest.Deps{Kafka: b.cl, KafkaOpts: b.opts, Registerer: reg, Log: cfg.Log})
	if err != nil {
		return m, err
	}
	ictx, stopIngest := context.WithCancel(ctx)
	ingErr := make(chan error, 1)
	go func() { ingErr <- ing.Run(ictx) }()
	// Every path waits for ingest to have flushed and stopped before the
	// broker's client closes.
	endIngest := sync.OnceValue(func() error { stopIngest(); return <-ingErr })
	defer endIngest()

	// The publisher sends once ingest's subscription reached it.
	started := make(chan error, 1)
	go func() { started <- pub.sending() }()
	select {
	case err := <-started:
		if err != nil {
			return m, err
		}
	case err := <-ingErr:
		ingErr <- err
		return m, fmt.Errorf("bench ingest: ingest stopped before subscribing: %v", err)
	case <-time.After(cfg.StallTimeout):
		return m, fmt.Errorf("bench ingest: ingest did not subscribe to %s within %s", pub.endpoint(), cfg.StallTimeout)
	case <-ctx.Done():
		return m, ctx.Err()
	}
	cpu0, t0 := cpuTime(), time.Now()
	log.Info("bench ingest: publisher sending", "endpoint", pub.endpoint())

	produced := ing.Metrics().Produced.WithLabelValues(b.names.Physical(events.TopicKvEvents))
	if err := waitAcked(ctx, cfg, produced, float64(w.Messages+1), ingErr, log); err != nil {
		return m, err
	}
	m.wall, m.ingestCPU = time.Since(t0), cpuTime()-cpu0

	if err := endIngest(); err != nil {
		return m, fmt.Errorf("bench ingest: ingest: %w", err)
	}
	if m.pubCPU, m.pubApart, err = pub.stop(); err != nil {
		return m, err
	}
	d, err := readDelivery(reg)
	if err != nil {
		return m, err
	}
	return m, d.check(w)
}

// waitAcked polls the acknowledged-records counter until it reaches want,
// logging progress. No progress for cfg.StallTimeout means records were
// lost (or the broker is gone): an error, never a partial figure.
func waitAcked(ctx context.Context, cfg Config, produced prometheus.Counter, want float64, ingErr chan error, log *slog.Logger) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var last float64
	lastChange, lastLog := time.Now(), time.Now()
	for {
		got := testutil.ToFloat64(produced)
		if got >= want {
			return nil
		}
		now := time.Now()
		if got != last {
			last, lastChange = got, now
		} else if now.Sub(lastChange) > cfg.StallTimeout {
			return fmt.Errorf("bench ingest: %.0f of %.0f records acknowledged, none for %s: events were lost", got, want, cfg.StallTimeout)
		}
		if now.Sub(lastLog) >= 2*time.Second {
			log.Info("bench ingest: progress", "acknowledged", got, "of", want)
			lastLog = now
		}
		select {
		case <-tick.C:
		case err := <-ingErr:
			ingErr <- err
			return errors.Join(errors.New("bench ingest: ingest stopped during the run"), err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// cpuTime is this process's CPU time (getrusage self: a child's is not in
// it).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
