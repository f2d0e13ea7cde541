package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/ingest"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/sim"
)

// TestSimulatedFleetEndToEnd is the whole data path on the real
// broker: simulated engines publish vLLM KV events over real ZMQ, ingest
// writes them to Kafka, the replica materializes them, and the fleet's
// requests are routed through the API. Shared system prompts must make some
// requests local; long first turns must go remote.
func TestSimulatedFleetEndToEnd(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	a := quietApp(t, brokers)
	rf := parseRouterFlags(t, nil, "--router-conditional-disagg")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	icfg := ingest.Config{Names: a.names(), WatchWorkers: true, ScrapeInterval: time.Second}
	url := runInProcess(t, ctx, &routerRun{a: a, f: rf, connOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, ingestCfg: &icfg})

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
}
