package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/events/eventstest"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/statestore"
)

// run executes the CLI in-process with the given environment.
func run(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &app{env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, stdout: &out, stderr: &errb}
	root := newRootCmd(a)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

func TestMigrateCommandTwiceThenDrift(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		t.Cleanup(func() { kafkatest.DeleteTopics(t, brokers, prefix) })
		env := map[string]string{"PDR_BROKERS": strings.Join(brokers, ","), "PDR_TOPIC_PREFIX": prefix}
		args := []string{"migrate", "--replication-factor", "1", "--min-insync-replicas", "1"}
		out, _, err := run(t, env, args...)
		if err != nil || !strings.Contains(out, "8 created, 0 unchanged, 0 drifted") {
			t.Fatalf("first migrate: %v\n%s", err, out)
		}
		var second string
		for i := 0; i < 50; i++ { // until the new topics show in metadata
			second, _, err = run(t, env, args...)
			if err == nil && strings.Contains(second, "0 created, 8 unchanged, 0 drifted") {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil || !strings.Contains(second, "0 created, 8 unchanged, 0 drifted") {
			t.Fatalf("second migrate changed something: %v\n%s", err, second)
		}
		// Planted drift: exit status 3, the difference printed, --allow-drift exits 0.
		adm := kadm.NewClient(kafkatest.Client(t, brokers))
		if _, err := adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "min.insync.replicas", Value: kadm.StringPtr("1")}, {Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("delete")}}, prefix+"workers"); err != nil {
			t.Fatal(err)
		}
		var ec exitCode
		for i := 0; i < 50; i++ { // until the broker's metadata shows the new configs
			out, _, err = run(t, env, args...)
			if errors.As(err, &ec) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !errors.As(err, &ec) || ec != exitDrift {
			t.Fatalf("drift: err %v, want exit status %d\n%s", err, exitDrift, out)
		}
		if !strings.Contains(out, "drift cleanup.policy: declared compact, actual delete") {
			t.Fatalf("drift not reported exactly:\n%s", out)
		}
		if _, _, err := run(t, env, append(args, "--allow-drift")...); err != nil {
			t.Fatalf("--allow-drift: %v", err)
		}
	})
}

func TestLogTailCommand(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		kafkatest.Migrate(t, brokers, prefix)
		n := events.Names{Prefix: prefix}
		s := eventstest.All()[2] // workers
		r, err := events.NewRecord(n, s.Key, s.Msg)
		if err != nil {
			t.Fatal(err)
		}
		if err := kafkatest.Client(t, brokers).ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		out, _, err := run(t, nil, "log", "tail", "workers", "--json", "--brokers", strings.Join(brokers, ","), "--topic-prefix", prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"schema":"pdrouter.events.v1.WorkerRegistration"`, `"worker_id":"decode-1"`, `"pool":"POOL_DECODE"`, `"total_kv_blocks":"16384"`} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %s:\n%s", want, out)
			}
		}
		text, _, err := run(t, nil, "log", "tail", "workers", "--brokers", strings.Join(brokers, ","), "--topic-prefix", prefix)
		if err != nil || !strings.HasPrefix(text, prefix+"workers/") || !strings.Contains(text, "WorkerRegistration") {
			t.Fatalf("text output: %v\n%s", err, text)
		}
	})
}

func TestBadInputIsAPreciseError(t *testing.T) {
	cases := []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"migrate"}, "migrate needs --brokers"},
		{nil, []string{"log", "tail", "nope", "--brokers", "127.0.0.1:1"}, `unknown topic "nope"`},
		{nil, []string{"log", "tail", "load"}, "log tail needs --brokers"},
		{nil, []string{"log", "tail", "load", "--brokers", "127.0.0.1:1", "--from-offset", "x"}, "--from-offset \"x\""},
		{nil, []string{"log", "tail", "load", "--brokers", "127.0.0.1:1", "--from-offset", "1", "--from-time", "0"}, "exclude each other"},
		{map[string]string{"PDR_LOG_LEVEL": "loud"}, []string{"version"}, "--log-level \"loud\""},
		{map[string]string{"PDR_TOPIC_PREFIX": "a/b"}, []string{"version"}, "--topic-prefix"},
		{nil, []string{"migrate", "--brokers", "nohost"}, `--brokers: "nohost" is not host:port`},
		{nil, []string{"migrate", "--brokers", "h:1", "--partitions", "kv-events"}, "want topic=n"},
		{nil, []string{"migrate", "--brokers", "h:1", "--min-insync-replicas", "4"}, "--min-insync-replicas 4"},
		{nil, []string{"migrate", "--brokers", "h:1", "--kafka-sasl-mechanism", "plain"}, "needs --kafka-sasl-user"},
		{map[string]string{"PDR_BROKERS": "h:1"}, []string{"dev"}, "dev runs its own broker"},
		{map[string]string{"PDR_KAFKA_TLS": "maybe"}, []string{"version"}, "PDR_KAFKA_TLS"},
		{nil, []string{"bench", "ingest", "--events-per-message", "0"}, "need --events ≥ 1, --events-per-message ≥ 1"},
		{map[string]string{"PDR_MEMORY_LIMIT": "lots"}, []string{"serve", "--brokers", "127.0.0.1:1"}, `--memory-limit "lots": want a size`},
		{nil, []string{"ingest", "--brokers", "127.0.0.1:1", "--gc-percent", "-3"}, "--gc-percent -3: want ≥ 0"},
		{nil, []string{"bench", "api", "--router", "http://127.0.0.1:1", "--in-flight", "-1"}, "--in-flight ≥ 0"},
		{nil, []string{"serve", "--brokers", "127.0.0.1:1", "--decision-retention", "0s"}, "--decision-retention 0s: want at least 1s"},
		{nil, []string{"serve", "--brokers", "127.0.0.1:1", "--decision-search-concurrency", "0"}, "--decision-search-concurrency 0, --decision-search-timeout 10s: want at least 1 search and 1s"},
		{map[string]string{"PDR_DECISION_SEARCH_TIMEOUT": "10ms"}, []string{"serve", "--brokers", "127.0.0.1:1"}, "--decision-search-timeout 10ms"},
		{nil, []string{"serve", "--brokers", "127.0.0.1:1", "--cell", "4/4"}, `--cell: cell "4/4": want 0 ≤ i < n`},
		{map[string]string{"PDR_CELL": "half"}, []string{"ingest", "--brokers", "127.0.0.1:1"}, `--cell: cell "half": want i/n`},
		{map[string]string{"PDR_MAX_WORKERS": "0"}, []string{"serve", "--brokers", "127.0.0.1:1"}, "--max-workers 0: want at least 1"},
		{map[string]string{"PDR_PEER_REQUESTS": "disk"}, []string{"serve", "--brokers", "127.0.0.1:1"}, `--peer-requests "disk": want memory or pebble`},
		{nil, []string{"serve", "--brokers", "127.0.0.1:1", "--idempotency-window", "10s"}, "--idempotency-window 10s: want 30s to --decision-retention (24h0m0s)"},
		{map[string]string{"PDR_IDEMPOTENCY_WINDOW": "25h"}, []string{"serve", "--brokers", "127.0.0.1:1"}, "--idempotency-window 25h0m0s: want 30s to --decision-retention"},
		{nil, []string{"serve", "--brokers", "127.0.0.1:1", "--latency-model-window", "45s"}, "--latency-model-window 45s: want a multiple of 30s"},
		{map[string]string{"PDR_LATENCY_MODEL_MAX_ENTRIES": "0"}, []string{"serve", "--brokers", "127.0.0.1:1"}, "--latency-model-max-entries 0"},
		{nil, []string{"sim", "compare", "--load-scale", "0"}, "--load-scale 0: must be in (0, 100]"},
		{nil, []string{"sim", "compare", "--shapes", "2P6D,3P6D"}, "a sweep splits one fleet"},
		{nil, []string{"bench", "scale", "--replica-memory-limit", "lots"}, `--replica-memory-limit: --memory-limit "lots"`},
		{nil, []string{"serve", "--brokers", "127.0.0.1:1", "--fetch-max-wait", "5ms"}, "--fetch-max-wait 5ms: want at least 1 byte and 10ms"},
		{nil, []string{"serve", "--brokers", "127.0.0.1:1", "--load-deltas", "rows"}, `--load-deltas "rows": want off, write, apply or snapshots`},
		{nil, []string{"serve", "--brokers", "127.0.0.1:1", "--load-deltas", "snapshots", "--bootstrap-from", "http://127.0.0.1:1/v1/state/snapshot"},
			"--bootstrap-from with --load-deltas snapshots: a peer's snapshot holds that peer's own requests"},
		{map[string]string{"PDR_LOAD_DELTAS": "snapshots"}, []string{"serve", "--brokers", "127.0.0.1:1", "--replica-id", ""}, `--replica-id "": with --load-deltas snapshots`},
		{nil, []string{"bench", "floor-replica", "--brokers", "127.0.0.1:1", "--load-deltas", "rows"}, `--load-deltas "rows": want off, write, apply or snapshots`},
		{map[string]string{"PDR_FETCH_MIN_BYTES": "0"}, []string{"serve", "--brokers", "127.0.0.1:1"}, "--fetch-min-bytes 0, --fetch-max-wait 50ms: want at least 1 byte and 10ms"},
		{map[string]string{"PDR_SIM_VIA": "carrier-pigeon"}, []string{"dev", "--sim"}, `--sim-via "carrier-pigeon": want route or door`},
		{nil, []string{"sim", "--router", "http://127.0.0.1:1", "--max-requests", "1", "--kv-hold-timeout", "0s"}, "--kv-hold-timeout 0s: must be > 0"},
	}
	for _, c := range cases {
		_, _, err := run(t, c.env, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: error %v, want it to say %q", c.env, c.args, err, c.want)
		}
	}
}

func TestDevStartsMigratesAndRestarts(t *testing.T) {
	dir := t.TempDir()
	args := []string{"dev", "--data-dir", dir, "--kafka-port", "0", "--http-addr", "127.0.0.1:0", "--exit-after", "3s"}
	out, _, err := run(t, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DEVELOPMENT BROKER", "not for production", "kafka      127.0.0.1:", "8 created, 0 already there", "api        http://127.0.0.1:"} {
		if !strings.Contains(out, want) {
			t.Errorf("dev output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = run(t, nil, args...)
	if err != nil || !strings.Contains(out, "0 created, 8 already there") {
		t.Fatalf("restart on the same data dir: %v\n%s", err, out)
	}
}

func TestVersionListsSchemas(t *testing.T) {
	out, _, err := run(t, nil, "version")
	if err != nil || !strings.Contains(out, "pdrouter.events.v1.DecisionRecord") {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestRouterFlagsReachTheStore: the replica flags that shape the state
// arrive in the statestore's options.
func TestRouterFlagsReachTheStore(t *testing.T) {
	rf := parseRouterFlags(t, nil, "--decision-retention", "90m", "--router-active-request-expiry", "7m", "--fetch-min-bytes", "4096", "--fetch-max-wait", "25ms", "--max-workers", "17", "--cell", "3/4", "--idempotency-window", "5m")
	if err := rf.validate(); err != nil {
		t.Fatal(err)
	}
	a := &app{env: func(string) (string, bool) { return "", false }, log: slog.New(slog.DiscardHandler)}
	cfg, err := rf.decider.Config(a.env)
	if err != nil {
		t.Fatal(err)
	}
	o := (&routerRun{a: a, f: rf}).storeOptions(cfg, nil)
	if o.DecisionRetention != 90*time.Minute || o.ActiveExpiry != 7*time.Minute || o.MaxWorkers != 17 || o.Cell != (events.Cell{Index: 3, Count: 4}) {
		t.Fatalf("store options: decision retention %s, active expiry %s, max workers %d, cell %s; want 90m, 7m, 17 and 3/4", o.DecisionRetention, o.ActiveExpiry, o.MaxWorkers, o.Cell)
	}
	if !o.PeerSums || o.Source != statestore.SourceLoadDeltas || o.IdempotencyWindow != 5*time.Minute {
		t.Fatalf("store options: peer sums %v, source %s, idempotency window %s; want the group's requests in memory by default, from load deltas, held 5m", o.PeerSums, o.Source, o.IdempotencyWindow)
	}
	if m := (&routerRun{a: a, f: rf}).materializerOptions(prometheus.NewRegistry()); m.FetchMinBytes != 4096 || m.FetchMaxWait != 25*time.Millisecond {
		t.Fatalf("materializer options: fetch min bytes %d, max wait %s; want 4096 and 25ms", m.FetchMinBytes, m.FetchMaxWait)
	}
	rf = parseRouterFlags(t, nil, "--peer-requests", "pebble")
	if err := rf.validate(); err != nil {
		t.Fatal(err)
	}
	if (&routerRun{a: a, f: rf}).storeOptions(cfg, nil).PeerSums {
		t.Fatal("--peer-requests pebble: the store still holds the group's requests in memory")
	}
}
