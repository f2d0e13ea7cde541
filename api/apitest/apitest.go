// Package apitest starts a router replica in-process for the tests of the
// API's clients: the real API over HTTP on a loopback port, backed by a
// Pebble statestore that a materializer keeps current from the Kafka topics
// the API writes to. A client's requests are validated by the real
// endpoints, and what it registered is visible in the replica's answers
// once applied, as in production.
package apitest

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/statestore"
)

// Replica is a running router replica. Everything is stopped when the test
// ends.
type Replica struct {
	// URL is the base URL of its HTTP API.
	URL string
	// Names are its topics (a prefix of the test's own).
	Names events.Names
}

// Start starts a replica on brokers (kafkatest.Fake for a unit test,
// kafkatest.Brokers for the real broker) on topics of its own, with the
// API options opts, and returns once it has caught up with its log.
func Start(t testing.TB, brokers []string, opts ...api.Option) *Replica {
	t.Helper()
	names := events.Names{Prefix: kafkatest.Prefix(t)}
	kafkatest.Migrate(t, brokers, names.Prefix)
	reg := prometheus.NewRegistry()
	store, err := statestore.Open(filepath.Join(t.TempDir(), "store"), statestore.Options{Names: names, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	mat, err := statestore.NewMaterializer(store, statestore.MaterializerOptions{
		Client: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := api.NewCatchUp(mat, slog.New(slog.DiscardHandler))
	done := make(chan struct{}, 2)
	go func() { _ = started.Run(ctx); done <- struct{}{} }()
	go func() { _ = mat.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done; mat.Close(); _ = store.Close() })

	dec, err := decider.New(decider.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	log := api.NewGroupLog(kafkatest.Client(t, brokers, api.GroupLogClientOpts()...), names, 64<<20, nil)
	srv, err := api.New(api.Deps{State: &api.StoreState{Store: store, Lag: mat}, Decider: dec, Log: log, Names: names, Started: started},
		append([]api.Option{api.WithMetrics(reg, reg), api.WithLogger(slog.New(slog.DiscardHandler)),
			api.WithAfterTimeout(3 * time.Second), api.WithAuditTimeout(3 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	for deadline := time.Now().Add(30 * time.Second); !started.CaughtUp(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("apitest: the replica never caught up with its log")
		}
	}
	return &Replica{URL: hs.URL, Names: names}
}
