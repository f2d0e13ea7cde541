package ingestbench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestMain lets the tests re-execute this binary as the publisher process
// (what `pdrouter bench ingest-publisher` is in production).
func TestMain(m *testing.M) {
	if os.Getenv("PDR_INGESTBENCH_PUBLISHER") == "1" {
		k, _ := strconv.Atoi(os.Getenv("PDR_INGESTBENCH_EVENTS_PER_MESSAGE"))
		n, _ := strconv.Atoi(os.Getenv("PDR_INGESTBENCH_MESSAGES"))
		if err := ServePublisher(context.Background(), PublisherConfig{EventsPerMessage: k, Messages: n}, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childPublisher re-executes the test binary as the publisher of w, which
// sends lose messages fewer than w asks for.
func childPublisher(lose int) func(Workload) *exec.Cmd {
	return func(w Workload) *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "PDR_INGESTBENCH_PUBLISHER=1",
			"PDR_INGESTBENCH_EVENTS_PER_MESSAGE="+strconv.Itoa(w.EventsPerMessage),
			"PDR_INGESTBENCH_MESSAGES="+strconv.Itoa(w.Messages-lose))
		return cmd
	}
}

// The table's run at a tiny size, with the publisher in its own process,
// on the in-process kfake (Brokers empty, as `bench ingest` without
// --brokers) and on the real broker.
func TestRunSmall(t *testing.T) {
	for _, tc := range []struct {
		name    string
		brokers func(t testing.TB) []string
		label   string
	}{
		{"kfake", func(testing.TB) []string { return nil }, "in-process kfake (dev broker, not Kafka)"},
		{"kafka", kafkatest.Brokers, "real broker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			res, err := Run(context.Background(), Config{Events: 2000, Batched: 8, Brokers: tc.brokers(t), PublisherCommand: childPublisher(0)}, &out)
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 6 || !strings.Contains(out.String(), tc.label) || !strings.Contains(out.String(), "8 events per ZMQ message") {
				t.Fatalf("%d rows, want 6 saying %q:\n%s", len(res), tc.label, out.String())
			}
			if res[0].Bar == "report" || res[3].Bar != "report" {
				t.Errorf("the bar is for 1 event per message only:\n%s", out.String())
			}
			t.Logf("\n%s", out.String())
		})
	}
}

// Without a publisher command the publisher runs in this process, and the
// table says its CPU is in ingest's.
func TestRunInProcessPublisher(t *testing.T) {
	var out bytes.Buffer
	if _, err := Run(context.Background(), Config{Events: 500}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "its CPU is in the ingest row") {
		t.Fatalf("table:\n%s", out.String())
	}
}

// A run whose publisher sends fewer messages than asked is an error, not a
// figure.
func TestLostEventsFailTheRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	_, err := Run(ctx, Config{Events: 500, StallTimeout: 2 * time.Second, PublisherCommand: childPublisher(10)}, &out)
	if err == nil || !strings.Contains(err.Error(), "491 of 501 records acknowledged") || !strings.Contains(err.Error(), "events were lost") {
		t.Fatalf("err %v, want the loss named\n%s", err, out.String())
	}
	if out.Len() != 0 {
		t.Errorf("a table was printed for a run that lost events:\n%s", out.String())
	}
}

// The delivery check names every kind of loss the metrics can show.
func TestDeliveryCheck(t *testing.T) {
	w := Workload{EventsPerMessage: 4, Messages: 100}
	clean := delivery{produced: 101, stored: 400, resets: 1}
	if err := clean.check(w); err != nil {
		t.Fatalf("clean run: %v", err)
	}
	for _, c := range []struct {
		d    delivery
		want string
	}{
		{delivery{produced: 102, stored: 396, resets: 2}, "source resets"},
		{delivery{produced: 102, stored: 396, resets: 2}, "BlockStored events written: 396, want 400"},
		{delivery{produced: 101, stored: 400, resets: 1, gaps: 1}, "sequence gaps"},
		{delivery{produced: 100, stored: 400, resets: 1, produceErrs: 1}, "records Kafka refused"},
		{delivery{produced: 101, stored: 396, resets: 2, decodeErrors: 1}, "undecodable batches"},
		{delivery{produced: 101, stored: 400, resets: 1, frameErrors: 1}, "badly framed"},
	} {
		err := c.d.check(w)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "events were lost") {
			t.Errorf("%+v: err %v, want it to say %q", c.d, err, c.want)
		}
	}
}
