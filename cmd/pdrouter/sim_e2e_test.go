package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/ingest"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/sim"
)

// TestSimulatedFleetEndToEnd is issue 8's end-to-end path on the real
// broker: simulated engines publish vLLM KV events over real ZMQ, ingest
// writes them to Kafka, the replica materializes them, and the fleet's
// requests are routed through the API. Shared system prompts must make some
// requests local; long first turns must go remote.
func TestSimulatedFleetEndToEnd(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)

	a := &app{env: func(string) (string, bool) { return "", false }, stdout: io.Discard, stderr: io.Discard,
		topicPrefix: prefix, dataDir: t.TempDir(), httpAddr: "127.0.0.1:0", log: slog.New(slog.DiscardHandler)}
	var rf routerFlags
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	rf.bindFlags(fs)
	if err := fs.Parse([]string{"--router-conditional-disagg"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ready := make(chan string, 1)
	icfg := ingest.Config{Names: a.names(), WatchWorkers: true, ScrapeInterval: time.Second}
	r := &routerRun{a: a, f: &rf, connOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, ingestCfg: &icfg,
		listening: func(addr string) { ready <- addr }}
	done := make(chan error, 1)
	go func() { done <- r.run(ctx) }()
	var url string
	select {
	case addr := <-ready:
		url = "http://" + addr
	case err := <-done:
		t.Fatalf("router: %v", err)
	}

	syn := sim.DefaultSynthetic()
	syn.Duration, syn.Seed = 40*time.Second, 3
	w, err := sim.Synthetic(syn)
	if err != nil {
		t.Fatal(err)
	}
	w = w.Head(60)
	cfg := sim.RunConfig{RouterURL: url, Fleet: sim.DefaultFleet(), TimeScale: 4, Progress: -1}
	rep, err := sim.RunFleet(ctx, cfg, w, sim.RunDeps{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("routed %d: %d local, %d remote, reasons %v", rep.Requests, rep.Local, rep.Remote, rep.Reasons)
	if rep.Local == 0 || rep.Remote == 0 {
		t.Fatalf("want decisions both ways, got %d local and %d remote (%v)", rep.Local, rep.Remote, rep.Reasons)
	}
	if rep.Reasons["bypass_allowed_decode_gate_disabled"] == 0 {
		t.Fatalf("no request bypassed on a cached prefix: KV events did not reach the state (%v)", rep.Reasons)
	}
	cancel()
	<-done
}
