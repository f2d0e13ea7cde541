package ingest_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/pdrouter/pdrouter/ingest"
	"github.com/pdrouter/pdrouter/ingest/ingestbench"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestBenchZMQToKafka is the measurement of `pdrouter bench ingest`
// (ingest/ingestbench) with a choice of publisher: one-block events per
// second from an engine publisher over ZMQ into the real broker through one
// ingest process. It runs only with PDR_INGEST_BENCH=1 (it is a
// measurement, not a check; `go test ./ingest/ingestbench` checks the
// code at a tiny size):
//
//	PDR_INGEST_BENCH=1 PDR_INGEST_BENCH_EVENTS=32 PDR_INGEST_BENCH_BATCHES=20000 \
//	  go test -run TestBenchZMQToKafka -v ./ingest
//
// PDR_INGEST_BENCH_EVENTS is the events per message, _BATCHES the messages.
// PDR_INGEST_BENCH_PUB picks the publisher: "go" (default), ingestbench's
// buffered ZMTP PUB in a separate process (this test binary re-executed as
// TestBenchPublisherChild); "pyzmq", testdata/bench_pub.py, a libzmq XPUB
// in a Python process; or "inproc", the go publisher in this process (its
// CPU is then counted as ingest's). The CPU reported for ingest is this
// process's own (getrusage self; children are not included).
func TestBenchZMQToKafka(t *testing.T) {
	if os.Getenv("PDR_INGEST_BENCH") != "1" {
		t.Skip("set PDR_INGEST_BENCH=1 to run the ingest throughput measurement")
	}
	k, _ := strconv.Atoi(os.Getenv("PDR_INGEST_BENCH_EVENTS"))
	n, _ := strconv.Atoi(os.Getenv("PDR_INGEST_BENCH_BATCHES"))
	k, n = max(k, 1), max(n, 1000)
	cfg := ingestbench.Config{Events: n * k, EventsPerMessage: k, Brokers: kafkatest.Brokers(t), QueueSize: 4096,
		Log: slog.New(slog.NewTextHandler(testLog{t}, nil))}
	switch kind := os.Getenv("PDR_INGEST_BENCH_PUB"); kind {
	case "", "go":
		cfg.PublisherCommand = func(w ingestbench.Workload) *exec.Cmd {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBenchPublisherChild$")
			cmd.Env = append(os.Environ(), "PDR_INGEST_BENCH_CHILD=1",
				"PDR_INGEST_BENCH_EVENTS="+strconv.Itoa(w.EventsPerMessage), "PDR_INGEST_BENCH_BATCHES="+strconv.Itoa(w.Messages))
			return cmd
		}
	case "pyzmq":
		py := ingest.VenvPython(t)
		file := filepath.Join(t.TempDir(), "payloads.bin")
		cfg.PublisherCommand = func(w ingestbench.Workload) *exec.Cmd {
			writePayloads(t, file, ingestbench.Payloads(w.EventsPerMessage))
			return exec.Command(py, "testdata/bench_pub.py", file, strconv.Itoa(w.Messages))
		}
	case "inproc":
	default:
		t.Fatalf("PDR_INGEST_BENCH_PUB=%q: want go, pyzmq or inproc", kind)
	}
	var out bytes.Buffer
	if _, err := ingestbench.Run(context.Background(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
}

// TestBenchPublisherChild is the "go" publisher; it runs only as the child
// of TestBenchZMQToKafka.
func TestBenchPublisherChild(t *testing.T) {
	if os.Getenv("PDR_INGEST_BENCH_CHILD") != "1" {
		t.Skip("the publisher child of TestBenchZMQToKafka")
	}
	k, _ := strconv.Atoi(os.Getenv("PDR_INGEST_BENCH_EVENTS"))
	n, _ := strconv.Atoi(os.Getenv("PDR_INGEST_BENCH_BATCHES"))
	if err := ingestbench.ServePublisher(context.Background(), ingestbench.PublisherConfig{EventsPerMessage: k, Messages: n}, os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

// writePayloads stores payloads for bench_pub.py: each a 4-byte big-endian
// length, then its bytes.
func writePayloads(t testing.TB, path string, payloads [][]byte) {
	var b []byte
	for _, p := range payloads {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// testLog sends the measurement's progress to the test log.
type testLog struct{ t testing.TB }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(b, "\n")))
	return len(b), nil
}
