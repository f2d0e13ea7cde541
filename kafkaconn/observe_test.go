package kafkaconn_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/kafkaconn"
)

// TestClientIdentityLogsAndMetrics: a client built with ClientOpts and
// Metrics names its role to the broker, logs through slog, and reports
// pdrouter_kafka_* series labeled by client and broker, none per partition.
func TestClientIdentityLogsAndMetrics(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	opts := append(kafkaconn.ClientOpts("router", log), kgo.SeedBrokers(fake.ListenAddrs()...), kafkaconn.Metrics(reg, "decisions"))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if id := cl.OptValue(kgo.ClientID); id != "pdrouter-router" {
		t.Errorf("client id %v, want pdrouter-router", id)
	}
	for i := range 64 {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "t", Key: []byte{byte(i)}, Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(logs.String(), "component=kafka") {
		t.Errorf("no franz-go log line reached slog: %q", logs.String())
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), kafkaconn.MetricsNamespace+"_") {
			t.Errorf("metric %s outside the namespace", mf.GetName())
		}
		names[mf.GetName()] = true
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["client"] != "decisions" {
				t.Errorf("%s %v: no client=decisions label", mf.GetName(), labels)
			}
			if _, ok := labels["partition"]; ok {
				t.Errorf("%s %v: a series per partition", mf.GetName(), labels)
			}
		}
	}
	for _, want := range []string{"pdrouter_kafka_connects_total", "pdrouter_kafka_produce_records_total"} {
		if !names[want] {
			t.Errorf("no %s among %v", want, names)
		}
	}
}

// lockedBuffer is written by the client's goroutines while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestMetricsOnAClientThatReplacesAClosedOne: a client that replaces a
// closed one (the materializer restarts its consumer that way) gets a
// Metrics option of its own on the same registry: the closed client's
// collectors left the registry, so the new ones register, and its series
// are served. One option must not serve both: its hooks keep state of one
// client, which the closed client's last hooks may still touch while the
// new client sets it up (a data race).
func TestMetricsOnAClientThatReplacesAClosedOne(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	reg := prometheus.NewRegistry()
	for i := range 2 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...), kafkaconn.Metrics(reg, "materializer"))
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == "pdrouter_kafka_connects_total" }) {
			t.Fatalf("client %d: no pdrouter_kafka_connects_total", i)
		}
		cl.Close()
	}
}
