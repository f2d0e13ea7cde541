package ingestbench

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/migrations"
)

// kfakeLabel is how a run on the in-process broker is labelled, in the
// same words as `pdrouter bench store`: its figures say nothing of Kafka.
const kfakeLabel = "in-process kfake (dev broker, not Kafka)"

// broker is where a measurement writes: a client on --brokers (or on an
// in-process kfake), and pdrouter's topics under a fresh prefix, so runs
// never see each other's records.
type broker struct {
	opts  []kgo.Opt
	cl    *kgo.Client
	names events.Names
	label string
	close func()
}

// openBroker connects, migrates the topics and waits until they answer.
// close deletes the topics and stops what was started.
func openBroker(ctx context.Context, cfg Config) (*broker, error) {
	b := &broker{label: "real broker " + fmt.Sprint(cfg.Brokers), opts: cfg.ClientOpts}
	var stops []func()
	b.close = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if len(cfg.Brokers) == 0 {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return nil, err
		}
		stops = append(stops, c.Close)
		b.opts, b.label = []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, kfakeLabel
	} else if len(b.opts) == 0 {
		b.opts = []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}
	}
	cl, err := kgo.NewClient(b.opts...)
	if err != nil {
		b.close()
		return nil, err
	}
	b.cl = cl
	stops = append(stops, cl.Close)
	prefix := fmt.Sprintf("bench-%d.", time.Now().UnixNano())
	b.names = events.Names{Prefix: prefix}
	specs, err := migrations.Declarations(migrations.SingleNodeOptions(prefix))
	if err != nil {
		b.close()
		return nil, err
	}
	adm := kadm.NewClient(cl)
	// Apply returns once the created topics answer (leaders elected), so
	// the first records of a measurement do not wait for that; 30 s at most.
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = migrations.Apply(mctx, cl, specs, false)
	cancel()
	if err != nil {
		b.close()
		return nil, fmt.Errorf("bench ingest: migrate: %w", err)
	}
	topics := make([]string, len(specs))
	for i, s := range specs {
		topics[i] = s.Name
	}
	stops = append(stops, func() { deleteTopics(adm, topics, cfg.Log) })
	cfg.Log.Info("bench ingest: topics migrated", "prefix", prefix, "broker", b.label)
	return b, nil
}

func deleteTopics(adm *kadm.Client, topics []string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := adm.DeleteTopics(ctx, topics...); err != nil {
		log.Warn("bench ingest: deleting the bench topics", "topics", topics, "err", err)
	}
}
