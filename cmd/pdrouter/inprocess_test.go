package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/spf13/pflag"

	"github.com/pdrouter/pdrouter/internal/envflags"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// quietApp is the app of a replica run inside the test process: no
// environment, output and logs discarded, its topics under a prefix of its
// own, migrated on brokers, its store in a temporary directory, its API on
// a free loopback port.
func quietApp(t *testing.T, brokers []string) *app {
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	return &app{env: func(string) (string, bool) { return "", false }, stdout: io.Discard, stderr: io.Discard,
		topicPrefix: prefix, dataDir: t.TempDir(), httpAddr: "127.0.0.1:0", log: slog.New(slog.DiscardHandler)}
}

// parseRouterFlags binds the replica flags to a fresh flag set, as `serve`
// does, and sets them from args, then from env (nil: no environment).
func parseRouterFlags(t *testing.T, env map[string]string, args ...string) *routerFlags {
	t.Helper()
	var rf routerFlags
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	rf.bindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := envflags.Apply(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	return &rf
}

// runInProcess runs r until the test ends (its cleanup stops the replica
// and waits for it) and returns its API's base URL once it listens; it
// fails the test if the replica ends first. r.listening is set here.
func runInProcess(t *testing.T, ctx context.Context, r *routerRun) string {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan string, 1)
	r.listening = func(addr string) { ready <- addr }
	done := make(chan error, 1)
	go func() { done <- r.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case addr := <-ready:
		return "http://" + addr
	case err := <-done:
		t.Fatalf("router: %v", err)
		return ""
	}
}
