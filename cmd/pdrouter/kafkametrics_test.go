package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestReplicaKafkaClientsReportMetrics: a replica serves franz-go's
// pdrouter_kafka_* series for the client that tails the log (the
// materializer's consumer, client="materializer") as for the one that
// writes decisions, so a dashboard sees the fetch side of the replica's
// Kafka traffic, not only the produce side.
func TestReplicaKafkaClientsReportMetrics(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := runInProcess(t, ctx, &routerRun{a: quietApp(t, prefix), f: parseRouterFlags(t, nil), connOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}})
	want := []string{"decisions", "materializer"}
	var clients []string
	// The materializer creates its consumer once it has listed the
	// partitions, and franz-go counts a connection once it is made: look a
	// few times.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		clients = clients[:0]
		for _, m := range scrapeFamilies(t, url)["pdrouter_kafka_connects_total"].GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "client" && m.GetCounter().GetValue() > 0 && !slices.Contains(clients, lp.GetValue()) {
					clients = append(clients, lp.GetValue())
				}
			}
		}
		slices.Sort(clients)
		if slices.Equal(clients, want) || time.Now().After(deadline) {
			break
		}
	}
	if !slices.Equal(clients, want) {
		t.Fatalf("pdrouter_kafka_connects_total has clients %v, want %v", clients, want)
	}
}
