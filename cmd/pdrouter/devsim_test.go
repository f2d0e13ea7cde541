package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/replay"
)

// TestDevSimThroughDoor: `pdrouter dev --sim` sends its workload through the
// front door by default, and its report says where each request went (the
// door's x-pdrouter-mode), what the engines did, and that every request's
// outcome joins its decision in an export of the dev broker.
func TestDevSimThroughDoor(t *testing.T) {
	out, stderr, err := run(t, nil, "dev", "--data-dir", t.TempDir(), "--kafka-port", "0", "--http-addr", "127.0.0.1:0",
		"--router-conditional-disagg", "--sim", "--sim-exit", "--sim-max-requests", "12", "--sim-time-scale", "10")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Log(out)
	// The fleet registers a moment after the router starts: a newcomer's
	// first run warns of nothing.
	if strings.Contains(stderr, "no worker is registered yet") {
		t.Fatalf("dev --sim warned of an empty registry while its fleet registered:\n%s", stderr)
	}
	if !strings.Contains(out, "== live via http://") || !strings.Contains(out, "outcomes     12 of 12 requests have their outcome joined to their decision (0 missing)") {
		t.Fatalf("the run did not go through the door, or outcomes are missing:\n%s", out)
	}
	m := regexp.MustCompile(`placement    local (\d+) \([^)]*\), remote (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no placement line:\n%s", out)
	}
	local, _ := strconv.Atoi(m[1])
	remote, _ := strconv.Atoi(m[2])
	if local+remote != 12 || strings.Contains(out, "not visible to the client") {
		t.Fatalf("placement of %d requests counted, want 12:\n%s", local+remote, out)
	}
	if regexp.MustCompile(`prefill load 0 tokens computed on prefill workers, 0 on decode workers`).MatchString(out) {
		t.Fatalf("the engines' figures are missing:\n%s", out)
	}
}

// TestCheckOutcomes: the outcome check counts a decision as joined only when
// its request has a terminal outcome on the log (a prefill_done alone, no
// outcome, or no decision at all is missing), ignores decisions before the
// window, and waits, bounded, for outcomes still being appended.
func TestCheckOutcomes(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	names := events.Names{Prefix: prefix}
	cl := kafkatest.Client(t, brokers)
	start := time.Now()
	produce := func(ms ...proto.Message) {
		t.Helper()
		for _, m := range ms {
			r, err := events.NewRecord(names, events.WorkerKey("decode-1"), m)
			if err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	at := start.Add(time.Second).UnixNano()
	decision := func(id string, at int64) *pb.DecisionRecord {
		d := eventstest.Decision(2, 1, 4)
		d.DecisionId, d.RequestId, d.DecidedAtUnixNano = id, "req-"+id, at
		return d
	}
	outcome := func(id string, k pb.OutcomeEvent_Kind) *pb.OutcomeEvent {
		return &pb.OutcomeEvent{RequestId: "req-" + id, DecisionId: id, Kind: k, DecodeWorker: &pb.WorkerRef{WorkerId: "decode-1"}, EventTimeUnixNano: at + 1e6}
	}
	produce(decision("old", start.Add(-time.Hour).UnixNano()), outcome("old", pb.OutcomeEvent_KIND_COMPLETED),
		decision("a", at), outcome("a", pb.OutcomeEvent_KIND_COMPLETED),
		decision("b", at), outcome("b", pb.OutcomeEvent_KIND_PREFILL_DONE),
		decision("c", at), outcome("c", pb.OutcomeEvent_KIND_CANCELLED),
		decision("d", at))
	src := &replay.KafkaLog{Client: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Names: names, Window: replay.Window{From: start}}
	ctx := context.Background()
	ids := []string{"a", "b", "c", "d", "old"}
	c, err := checkOutcomes(ctx, src, 6, ids, 0, time.Millisecond)
	if err != nil || c.Joined != 2 || c.Missing() != 4 || c.String() != "2 of 6 requests have their outcome joined to their decision (4 missing)" {
		t.Fatalf("%v: %+v %s", err, c, c)
	}
	// Outcomes appended while the check waits are found.
	go func() {
		time.Sleep(300 * time.Millisecond)
		produce(outcome("b", pb.OutcomeEvent_KIND_COMPLETED), outcome("d", pb.OutcomeEvent_KIND_COMPLETED))
	}()
	c, err = checkOutcomes(ctx, src, 4, ids[:4], 30*time.Second, 50*time.Millisecond)
	if err != nil || c.Joined != 4 || c.Missing() != 0 {
		t.Fatalf("%v: %+v", err, c)
	}
}

// TestBenchDoorSimEngines: `pdrouter bench door` runs against the simulated
// engines and prints both modes' TTFT and CPU per request.
func TestBenchDoorSimEngines(t *testing.T) {
	out, _, err := run(t, nil, "bench", "door", "--requests", "64", "--streams", "8", "--workers", "2", "--rounds", "2",
		"--prompt-tokens", "64", "--output-tokens", "8")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"ttft direct p50 / p99", "ttft via door p50 / p99", "cpu per request direct / via door", "door adds to ttft p99",
		"8 closed-loop streams of 64 prompt and 8 output tokens, 64 requests per mode in 2 alternating rounds, 2 engines"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in:\n%s", want, out)
		}
	}
}

// TestDevKafkaClientQuietUnlessAsked: the Kafka client's own info lines
// (connections, metadata, partition assignment) stay out of dev's log at the
// default --kafka-log-level warn, reach it with --kafka-log-level info, and never
// go below --log-level.
func TestDevKafkaClientQuietUnlessAsked(t *testing.T) {
	dev := func(extra ...string) string {
		args := append([]string{"dev", "--data-dir", t.TempDir(), "--kafka-port", "0", "--http-addr", "127.0.0.1:0", "--exit-after", "3s"}, extra...)
		_, stderr, err := run(t, nil, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", extra, err, stderr)
		}
		return stderr
	}
	kafkaInfo := regexp.MustCompile(`level=INFO msg=.* component=kafka`)
	if quiet := dev(); kafkaInfo.MatchString(quiet) || !strings.Contains(quiet, `msg="dev ready"`) {
		t.Fatalf("default: the Kafka client logged at info, or dev's own lines are gone:\n%s", quiet)
	}
	if loud := dev("--kafka-log-level", "info"); !kafkaInfo.MatchString(loud) {
		t.Fatalf("--kafka-log-level info: no Kafka client line at info:\n%s", loud)
	}
	if both := dev("--kafka-log-level", "info", "--log-level", "warn"); kafkaInfo.MatchString(both) {
		t.Fatalf("--log-level warn: the Kafka client still logged at info:\n%s", both)
	}
	if _, _, err := run(t, nil, "dev", "--kafka-log-level", "chatty"); err == nil || !strings.Contains(err.Error(), `--kafka-log-level "chatty"`) {
		t.Fatalf("a bad level: %v", err)
	}
}

// TestDevPrintsWhatToTryNext: after the report of a fleet that keeps serving,
// dev prints the API's URLs and the commands that look at and explain one
// decision of the run.
func TestDevPrintsWhatToTryNext(t *testing.T) {
	var out bytes.Buffer
	d := devSim{a: &app{stdout: &out}, sf: &simFlags{}, url: "http://127.0.0.1:8080", brokers: "127.0.0.1:9092"}
	d.printNext([]string{"", "01ABC"})
	for _, want := range []string{"curl -s http://127.0.0.1:8080/v1/workers", "curl -s http://127.0.0.1:8080/metrics",
		"/v1/chat/completions", "curl -s http://127.0.0.1:8080/v1/decisions/01ABC", "explain 01ABC --brokers 127.0.0.1:9092",
		"log tail decisions --brokers 127.0.0.1:9092"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lacks %q:\n%s", want, out.String())
		}
	}
}
