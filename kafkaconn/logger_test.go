package kafkaconn_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/kafkaconn"
)

// TestFlushesStayBelowInfo: a producer that flushes per append (the
// decisions log groups, the door's outcomes) must not write a log line per
// flush at info, the level `pdrouter dev` and `serve` run at; franz-go's
// other info lines (partition assignment, metadata) still reach it.
func TestFlushesStayBelowInfo(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	opts := append(kafkaconn.ClientOpts("router", log), kgo.SeedBrokers(fake.ListenAddrs()...), kgo.ManualFlushing())
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for range 20 {
		cl.Produce(context.Background(), &kgo.Record{Topic: "t", Value: []byte("v")}, nil)
		if err := cl.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "flush"); n > 0 {
		t.Errorf("%d info lines about flushing for 20 flushes:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "component=kafka") {
		t.Errorf("franz-go's other info lines no longer reach slog: %q", logs.String())
	}
}
