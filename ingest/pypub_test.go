package ingest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// pyPub is tests/python/zmq_kv_publisher.py running as a subprocess: a real
// libzmq peer (pyzmq) with a PUB and a replay ROUTER socket.
type pyPub struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Scanner
	Pub    string
	Replay string
	mu     sync.Mutex
	done   bool
}

// venvPython finds the test venv's interpreter (make test creates it). It
// skips the test without one, but fails under CI=true, like the broker.
func venvPython(t testing.TB) string {
	t.Helper()
	py := os.Getenv("PDR_TEST_PYTHON")
	if py == "" {
		py, _ = filepath.Abs("../.cache/venv/bin/python")
	}
	if err := exec.Command(py, "-c", "import zmq, msgspec").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python with pyzmq and msgspec not found at %s (%v): run `make test`, which installs tests/python/requirements.txt", py, err)
		}
		t.Skipf("python with pyzmq and msgspec not found at %s (%v): run `make test` or create .cache/venv", py, err)
	}
	return py
}

// startPyPub starts the publisher with extra flags; it is killed at the end
// of the test.
func startPyPub(t testing.TB, args ...string) *pyPub {
	t.Helper()
	py := venvPython(t)
	full := append([]string{"../tests/python/zmq_kv_publisher.py", "--vectors", vectorsFile}, args...)
	cmd := exec.Command(py, full...)
	cmd.Stderr = &testWriter{t: t, prefix: "pypub: "}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pyPub{t: t, cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	t.Cleanup(p.Kill)
	var ready struct {
		Ready  bool   `json:"ready"`
		Pub    string `json:"pub"`
		Replay string `json:"replay"`
	}
	p.read(&ready)
	p.Pub, p.Replay = ready.Pub, ready.Replay
	return p
}

func (p *pyPub) read(v any) {
	p.t.Helper()
	if !p.out.Scan() {
		p.t.Fatalf("publisher exited: %v", p.out.Err())
	}
	if err := json.Unmarshal(p.out.Bytes(), v); err != nil {
		p.t.Fatalf("publisher said %q: %v", p.out.Text(), err)
	}
}

// Do sends one command and waits for its answer; it returns the next seq.
func (p *pyPub) Do(cmd map[string]any) uint64 {
	p.t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("publisher stdin: %v", err)
	}
	var res struct {
		OK         string `json:"ok"`
		Seq        uint64 `json:"seq"`
		Subscribed *bool  `json:"subscribed"`
	}
	p.read(&res)
	if res.Subscribed != nil && !*res.Subscribed {
		p.t.Fatalf("no subscriber connected to the publisher at %s", p.Pub)
	}
	return res.Seq
}

// Kill stops the publisher at once, like a crashed engine.
func (p *pyPub) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	p.done = true
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

type testWriter struct {
	t      testing.TB
	prefix string
}

func (w *testWriter) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		w.t.Log(w.prefix + l)
	}
	return len(b), nil
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runIngest runs an Ingest in the background until the test ends and
// returns a function that stops it and reports its error.
func runIngest(t testing.TB, cfg Config, deps Deps) (*Ingest, func() error) {
	t.Helper()
	if deps.Log == nil {
		deps.Log = quietLog()
	}
	ing, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- ing.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-errc:
			case <-time.After(30 * time.Second):
				runErr = fmt.Errorf("ingest did not stop within 30s")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return ing, stop
}

func counterValue(t testing.TB, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}
