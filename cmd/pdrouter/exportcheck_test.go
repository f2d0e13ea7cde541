package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/ingest"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/sim"
)

// TestExportCheckOutcomes: `export decisions --check-outcomes` over a live
// run (real ZMQ, HTTP and Kafka) reports every decision of the run joined to
// its outcome, and a decision id the log does not hold as missing, with exit
// status 1: the check `make e2e` makes of a third-party fleet.
func TestExportCheckOutcomes(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		a := quietApp(t, brokers)
		rf := parseRouterFlags(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		icfg := ingest.Config{Names: a.names(), WatchWorkers: true, ScrapeInterval: time.Second}
		url := runInProcess(t, ctx, &routerRun{a: a, f: rf, connOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, ingestCfg: &icfg})

		w, err := sim.LoadMooncake(filepath.Join("..", "..", "testdata", "mooncake", "sample.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		const n = 8
		cfg := sim.RunConfig{RouterURL: url, Fleet: sim.DefaultFleet(), TimeScale: 10, Progress: -1}
		rep, err := sim.RunFleet(ctx, cfg, w.Head(n), sim.RunDeps{Log: slog.New(slog.DiscardHandler)})
		if err != nil || rep.Completed != n || len(rep.Decisions) != n {
			t.Fatalf("live run: %v; %d of %d completed, %d decisions", err, rep.Completed, n, len(rep.Decisions))
		}
		env := map[string]string{"PDR_BROKERS": strings.Join(brokers, ","), "PDR_TOPIC_PREFIX": a.topicPrefix}
		ids := filepath.Join(t.TempDir(), "ids.txt")
		if err := os.WriteFile(ids, []byte(strings.Join(rep.Decisions, "\n")+"\n\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, err := run(t, env, "export", "decisions", "--check-outcomes", ids, "--check-outcomes-wait", "30s", "--log-level", "error")
		if err != nil || !strings.Contains(stdout, "8 of 8 requests have their outcome joined to their decision (0 missing)") {
			t.Fatalf("check of the run: %v\n%s\n%s", err, stdout, stderr)
		}
		if err := os.WriteFile(ids, []byte(strings.Join(append(rep.Decisions, "01NOTADECISION0000000000000"), "\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		stdout, _, err = run(t, env, "export", "decisions", "--check-outcomes", ids, "--check-outcomes-wait", "1s", "--log-level", "error")
		if err == nil || !strings.Contains(stdout, "8 of 9 requests have their outcome joined to their decision (1 missing)") {
			t.Fatalf("an unknown decision id: %v\n%s", err, stdout)
		}
	})
}

// TestCheckOutcomesFileBounds: the ids file is read whole before the log, so
// it is bounded; each bad file is a precise error naming the line.
func TestCheckOutcomesFileBounds(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"export", "decisions", "--check-outcomes", write("empty", "\n \n")}, "no decision ids"},
		{[]string{"export", "decisions", "--check-outcomes", write("long", "a\n"+strings.Repeat("x", maxDecisionIDLen+1)+"\n")}, "long:2: a decision id is at most 256 bytes"},
		{[]string{"export", "decisions", "--check-outcomes", filepath.Join(dir, "absent")}, "--check-outcomes: open"},
		{[]string{"export", "outcomes", "--check-outcomes", write("one", "a\n")}, "--check-outcomes applies to `export decisions`"},
	}
	for _, c := range cases {
		_, _, err := run(t, map[string]string{"PDR_BROKERS": "127.0.0.1:1"}, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want it to say %q", c.args, err, c.want)
		}
	}
	ids, err := readDecisionIDs(write("ok", " a \n\nb\n"))
	if err != nil || strings.Join(ids, ",") != "a,b" {
		t.Fatalf("ids %q, %v", ids, err)
	}
}
