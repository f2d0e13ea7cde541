package main

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/ingest"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/sim"
)

// traceLine is a line of a Mooncake trace, as the test reads it back.
type traceLine struct {
	InputLength  int   `json:"input_length"`
	OutputLength int   `json:"output_length"`
	HashIDs      []int `json:"hash_ids"`
}

func readTraceLines(t *testing.T, path string) []traceLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []traceLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l traceLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// sharing is the prefix-sharing shape of a trace, independent of id names and of
// the order of requests: for each id of a full 512-token segment, how many requests
// use it, as a sorted list; and the sorted (input, output) lengths.
func sharing(lines []traceLine) (uses []int, lengths [][2]int) {
	n := map[int]int{}
	for _, l := range lines {
		full := l.InputLength / sim.MooncakeBlockTokens
		for _, id := range l.HashIDs[:min(full, len(l.HashIDs))] {
			n[id]++
		}
		lengths = append(lengths, [2]int{l.InputLength, l.OutputLength})
	}
	uses = slices.Sorted(maps.Values(n))
	slices.SortFunc(lengths, func(a, b [2]int) int { return a[0]*1e6 + a[1] - b[0]*1e6 - b[1] })
	return uses, lengths
}

// TestExportTraceRoundTrip: a Mooncake sample replayed live through a router (real
// ZMQ, HTTP and Kafka), exported from the log with `export trace`, has the same
// requests (lengths) and the same prefix sharing (how many requests share each
// full segment) as the sample, and `plan` and `sim` replay it.
func TestExportTraceRoundTrip(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		a := quietApp(t, brokers)
		rf := parseRouterFlags(t, nil, "--router-conditional-disagg")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		icfg := ingest.Config{Names: a.names(), WatchWorkers: true, ScrapeInterval: time.Second}
		url := runInProcess(t, ctx, &routerRun{a: a, f: rf, connOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, ingestCfg: &icfg})

		sample := filepath.Join("..", "..", "testdata", "mooncake", "sample.jsonl")
		w, err := sim.LoadMooncake(sample)
		if err != nil {
			t.Fatal(err)
		}
		const n = 40
		w = w.Head(n)
		cfg := sim.RunConfig{RouterURL: url, Fleet: sim.DefaultFleet(), TimeScale: 10, Progress: -1}
		rep, err := sim.RunFleet(ctx, cfg, w, sim.RunDeps{Log: slog.New(slog.DiscardHandler)})
		if err != nil || rep.Completed != n {
			t.Fatalf("live run: %v; %d of %d completed", err, rep.Completed, n)
		}

		out := filepath.Join(t.TempDir(), "trace.jsonl")
		env := map[string]string{"PDR_BROKERS": strings.Join(brokers, ","), "PDR_TOPIC_PREFIX": a.topicPrefix}
		var got []traceLine
		for i := 0; ; i++ { // outcomes reach the log after the answers
			stdout, stderr, err := run(t, env, "export", "trace", "--out", out, "--log-level", "error")
			if err != nil {
				t.Fatalf("export trace: %v\n%s", err, stderr)
			}
			if got = readTraceLines(t, out); len(got) == n || i == 50 {
				t.Logf("%s", stdout)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		want := readTraceLines(t, sample)[:n]
		gu, gl := sharing(got)
		wu, wl := sharing(want)
		if !slices.Equal(gl, wl) {
			t.Fatalf("lengths differ:\nexported %v\nsample   %v", gl, wl)
		}
		if !slices.Equal(gu, wu) {
			t.Fatalf("prefix sharing differs (requests per full-segment id):\nexported %v\nsample   %v", gu, wu)
		}
		if wu[len(wu)-1] < 2 {
			t.Fatal("the sample's head shares no prefix: the check would be empty")
		}
		// The same window exports the same bytes.
		first, _ := os.ReadFile(out)
		if _, stderr, err := run(t, env, "export", "trace", "--out", out, "--log-level", "error"); err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		if second, _ := os.ReadFile(out); string(first) != string(second) {
			t.Fatal("a second export of the same log differs")
		}
		planOut, stderr, err := run(t, nil, "plan", "--trace", out, "--gpus", "2", "--log-level", "error")
		if err != nil || !strings.Contains(planOut, "40 requests, 2 GPUs") || !strings.Contains(planOut, "recommended") {
			t.Fatalf("plan on the export: %v\n%s\n%s", err, planOut, stderr)
		}
	})
}
