package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// bench scale at a tiny size: replica processes are this test binary
// re-executed as pdrouter (TestMain, PDR_TEST_RUN_MAIN). --json prints the
// model alone on stdout; --validate loads groups of 2 and 3 replicas with
// every replica answering, then two cells of one and of two replicas. At this size the idle cost of a replica is a
// large share of its CPU, so the verdict may be MISSED; the run must
// still measure every replica. The validation, two more groups of replica
// processes, runs on the real broker, where bench scale is meant to run;
// on kfake the model's own run is checked. Both run --floor: the floor
// replicas, on each broker, must answer, append and fetch every record.
//
// The two brokers are two tests, not subtests of one, so that make test's
// shards of this package (scripts/gotest-exec.sh) run them side by side: each
// starts replica processes for a minute or more under the race detector.
func TestBenchScaleCommand(t *testing.T) { checkBenchScale(t, kafkatest.Fake(t), false) }

func TestBenchScaleCommandRealBroker(t *testing.T) { checkBenchScale(t, kafkatest.Brokers(t), true) }

func checkBenchScale(t *testing.T, brokers []string, validate bool) {
	t.Setenv("PDR_TEST_RUN_MAIN", "1") // for the replica children only
	// An operator's environment names a debug address for their own replica;
	// the children inherit it, and were they to take it, all but the first
	// would fail to bind.
	t.Setenv("PDR_DEBUG_ADDR", freeAddr(t))
	args := []string{"bench", "scale", "--brokers", strings.Join(brokers, ","), "--json", "--duration", "2s", "--warmup", "1s",
		"--clients", "3", "--decode-workers", "4", "--prefill-workers", "2", "--min-tokens", "64", "--max-tokens", "512",
		"--log-level", "warn", "--floor"}
	profiles := t.TempDir()
	if validate {
		args = append(args, "--validate")
	} else {
		args = append(args, "--profile-dir", profiles)
	}
	out, errOut, err := run(t, map[string]string{"PDR_DATA_DIR": t.TempDir()}, args...)
	if err != nil && !strings.Contains(err.Error(), "from the model's") {
		t.Fatalf("bench scale: %v\n%s\n%s", err, out, errOut)
	}
	var m struct {
		A          float64            `json:"cpu_us_per_answered"`
		P          float64            `json:"cpu_us_per_applied"`
		Capacity   map[string]float64 `json:"capacity"`
		Efficiency map[string]float64 `json:"efficiency"`
		Rate       float64            `json:"decisions_per_s"`
		Floor      *struct {
			A    float64 `json:"cpu_us_per_answered"`
			P    float64 `json:"cpu_us_per_applied"`
			Rate float64 `json:"decisions_per_s"`
		} `json:"floor"`
		AppendsPerGroup  float64   `json:"appends_per_group"`
		EntriesPerRecord float64   `json:"delta_entries_per_record"`
		ByPart           []float64 `json:"applied_us_by_part"`
		PebbleBytes      *float64  `json:"applied_pebble_bytes_per_decision"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("stdout is not the JSON object: %v\n%s", err, out)
	}
	if m.A <= 0 || m.P <= 0 || len(m.Capacity) != 5 || len(m.Efficiency) != 5 || m.Efficiency["1"] != 1 ||
		m.Capacity["16"] <= m.Capacity["1"] || m.Efficiency["16"] >= m.Efficiency["2"] {
		t.Fatalf("implausible model: %+v", m)
	}
	// The answering replica's group commits carried its decisions and
	// lifecycle events, each with its load delta (the default, apply).
	if m.AppendsPerGroup < 1 || m.EntriesPerRecord < 1 {
		t.Fatalf("implausible commit shape: %v appends a group commit, %v delta entries a record", m.AppendsPerGroup, m.EntriesPerRecord)
	}
	// p over each part of the measured time, and the peer spent CPU on
	// each. A sample missed on a loaded machine (a scrape that fails, or a
	// tick that comes after the measured time) joins two parts into one
	// (TestPeerCPUByPart holds the split itself), so the count is at most
	// scaleParts, never 0.
	if len(m.ByPart) == 0 || len(m.ByPart) > scaleParts || slices.ContainsFunc(m.ByPart, func(p float64) bool { return p <= 0 }) {
		t.Fatalf("p by part of the measured time: %v, want 1 to %d positive values", m.ByPart, scaleParts)
	}
	// What the peer's Pebble wrote per decision is read (it may be 0 in a
	// run too short to flush).
	if m.PebbleBytes == nil || *m.PebbleBytes < 0 {
		t.Fatalf("applied_pebble_bytes_per_decision: %v", m.PebbleBytes)
	}
	// The floor replicas answered, appended and fetched (bench scale
	// checks that each fetched every record its group appended).
	if m.Floor == nil || m.Floor.A <= 0 || m.Floor.P <= 0 || m.Rate <= 0 {
		t.Fatalf("--floor: no plausible floor in the JSON object: %s", out)
	}
	// The floor's load was paced at the replicas' rate (--floor-pace): a
	// floor replica does less per decision, and unpaced it answers faster.
	t.Logf("the replicas at %.0f decisions/s, the floor at %.0f", m.Rate, m.Floor.Rate)
	if allowed := m.Rate*1.2 + 5; m.Floor.Rate > allowed {
		t.Fatalf("--floor: the floor ran at %.0f decisions/s, the replicas at %.0f: not paced", m.Floor.Rate, m.Rate)
	}
	if !validate {
		// Each replica of the model's group, and each floor replica,
		// profiled its measured time.
		for _, name := range []string{"replicas-2-0.pprof", "replicas-2-1.pprof", "floor-2-0.pprof", "floor-2-1.pprof"} {
			raw, err := os.ReadFile(filepath.Join(profiles, name))
			if err != nil {
				t.Fatalf("--profile-dir: %v\n%s", err, errOut)
			}
			// A profile is a gzipped protobuf; an error page or a cut
			// body is not.
			zr, err := gzip.NewReader(bytes.NewReader(raw))
			if err != nil {
				t.Fatalf("--profile-dir: %s is not a profile: %v", name, err)
			}
			if body, err := io.ReadAll(zr); err != nil || len(body) == 0 {
				t.Fatalf("--profile-dir: %s is not a whole profile: %d bytes, %v", name, len(body), err)
			}
		}
		return
	}
	// The validation tables (on stderr, stdout being the JSON alone):
	// every replica of each group, cells included, answered some decisions.
	for _, g := range []string{"2 replicas in 1 cell(s)", "3 replicas in 1 cell(s)", "2 replicas in 2 cell(s)", "4 replicas in 2 cell(s)"} {
		if !strings.Contains(errOut, "validate: "+g) {
			t.Fatalf("no validation of %s:\n%s", g, errOut)
		}
	}
	rows := regexp.MustCompile(`(?m)^\s+(\d)\s+(\d)/(\d)\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s*$`).FindAllStringSubmatch(errOut, -1)
	if len(rows) != 11 {
		t.Fatalf("want 11 replica rows (2 + 3 + 2 + 4), got %d:\n%s", len(rows), errOut)
	}
	for _, r := range rows {
		if answered, _ := strconv.Atoi(r[4]); answered == 0 {
			t.Errorf("replica %s answered nothing: the load was not spread:\n%s", r[1], errOut)
		}
	}
}

// TestPeerCPUByPart: p by part of the measured time, a part without
// decisions merged into the next, and the rise from the first to the last.
func TestPeerCPUByPart(t *testing.T) {
	samples := []peerSample{{100, 1.0, 0}, {1100, 1.03, 4e6}, {1100, 1.04, 4e6}, {2100, 1.08, 5e6}, {3100, 1.13, 9e6}}
	got := perPart(samples)
	want := []float64{30, 50, 50}
	if len(got) != len(want) {
		t.Fatalf("perPart = %v, want %v", got, want)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-6 {
			t.Fatalf("perPart = %v, want %v", got, want)
		}
	}
	if r := rise(got); math.Abs(r-2.0/3) > 1e-9 {
		t.Errorf("rise(%v) = %v, want 2/3", got, r)
	}
	if b := pebbleBytesPerDecision(samples); b != 3000 {
		t.Errorf("Pebble bytes per decision = %v, want 9e6/3000", b)
	}
	if r := rise([]float64{40}); r != 0 {
		t.Errorf("rise of one part = %v, want 0", r)
	}
}

// TestScaleNamesAReplicaThatExited: when a run fails because a replica
// exited during it, the error is the replica's exit and the end of its
// output, not only the refused connection its absence caused.
func TestScaleNamesAReplicaThatExited(t *testing.T) {
	alive := &scaleReplica{url: "http://127.0.0.1:1", done: make(chan error, 1), out: &tailBuffer{max: 1024}}
	gone := &scaleReplica{url: "http://127.0.0.1:2", done: make(chan error, 1), out: &tailBuffer{max: 1024}}
	_, _ = gone.out.Write([]byte("pdrouter: start-up check: no prefill worker\n"))
	gone.done <- errors.New("exit status 1")
	refused := errors.New(`Post "http://127.0.0.1:2/v1/workers": connection refused`)
	err := exitedDuring([]*scaleReplica{alive, gone}, refused)
	for _, want := range []string{"replica http://127.0.0.1:2 exited during the run", "exit status 1", "no prefill worker", "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
	if !errors.Is(err, refused) {
		t.Fatal("the run's own error is not wrapped")
	}
	if err := exitedDuring([]*scaleReplica{alive}, refused); err != refused {
		t.Fatalf("with every replica running: %v, want the run's error as it is", err)
	}
}
