package ingest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
)

// The throughput measurement's engine publisher runs in a separate
// process, as engines do, so the ingest process's CPU is its own and the
// publisher does not compete inside one Go runtime. Two publishers:
//
//   - "go": this test binary re-executed as TestBenchPublisherChild: a
//     ZMTP PUB connection (go-zeromq's Conn) written through an 8 KiB
//     buffer, which is how libzmq's I/O thread writes a busy socket (many
//     messages per write syscall).
//   - "pyzmq": testdata/bench_pub.py, a libzmq XPUB through pyzmq, the
//     stack vLLM publishes with.
//
// Both bind, print "addr <endpoint>", wait for ingest's subscription, print
// "start", send seqs 0..n-1 cycling through the payloads, and stay up until
// their stdin closes.

// benchPub is a running publisher child.
type benchPub struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	Addr  string
}

// writePayloads stores payloads as 4-byte big-endian length + bytes.
func writePayloads(t testing.TB, payloads [][]byte) string {
	var b []byte
	for _, p := range payloads {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	path := filepath.Join(t.TempDir(), "payloads.bin")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func readPayloads(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for len(b) >= 4 {
		n := int(binary.BigEndian.Uint32(b))
		if 4+n > len(b) {
			return nil, fmt.Errorf("%s: truncated", path)
		}
		out = append(out, b[4:4+n])
		b = b[4+n:]
	}
	return out, nil
}

// startBenchPub starts a publisher child of kind "go" or "pyzmq" and waits
// for its address.
func startBenchPub(t testing.TB, kind, payloadFile string, n int) *benchPub {
	t.Helper()
	var cmd *exec.Cmd
	switch kind {
	case "go":
		cmd = exec.Command(os.Args[0], "-test.run=^TestBenchPublisherChild$")
		cmd.Env = append(os.Environ(), "PDR_INGEST_BENCH_CHILD=1", "PDR_INGEST_BENCH_PAYLOADS="+payloadFile,
			"PDR_INGEST_BENCH_BATCHES="+strconv.Itoa(n))
	case "pyzmq":
		cmd = exec.Command(venvPython(t), "testdata/bench_pub.py", payloadFile, strconv.Itoa(n))
	default:
		t.Fatalf("unknown publisher %q (go, pyzmq, inproc)", kind)
	}
	cmd.Stderr = &testWriter{t: t, prefix: "publisher: "}
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
	p := &benchPub{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p.Addr = strings.TrimPrefix(p.expect(t, "addr "), "addr ")
	return p
}

// expect reads lines until one starts with prefix.
func (p *benchPub) expect(t testing.TB, prefix string) string {
	t.Helper()
	for p.out.Scan() {
		if l := p.out.Text(); strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("publisher exited before saying %q: %v", prefix, p.out.Err())
	return ""
}

// stop closes the child's stdin, waits for it, and returns its CPU time.
func (p *benchPub) stop(t testing.TB) time.Duration {
	t.Helper()
	_ = p.stdin.Close()
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("publisher: %v", err)
	}
	return p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
}

// flushOnReadConn buffers writes and flushes them before every read, so the
// ZMTP handshake (write greeting, read the peer's) works unchanged while
// messages are written many per syscall.
type flushOnReadConn struct {
	net.Conn
	w *bufio.Writer
}

func (c *flushOnReadConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *flushOnReadConn) Read(p []byte) (int, error) {
	if err := c.w.Flush(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

// TestBenchPublisherChild is the "go" publisher; it runs only as the child
// of TestBenchZMQToKafka.
func TestBenchPublisherChild(t *testing.T) {
	if os.Getenv("PDR_INGEST_BENCH_CHILD") != "1" {
		t.Skip("the publisher child of TestBenchZMQToKafka")
	}
	payloads, err := readPayloads(os.Getenv("PDR_INGEST_BENCH_PAYLOADS"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(os.Getenv("PDR_INGEST_BENCH_BATCHES"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("addr tcp://%s\n", ln.Addr())
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	conn := &flushOnReadConn{Conn: nc, w: bufio.NewWriterSize(nc, 8<<10)}
	zc, err := zmq4.Open(conn, null.Security(), zmq4.Pub, zmq4.SocketIdentity(""), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sub, err := zc.RecvMsg(); err != nil || len(sub.Frames) != 1 || len(sub.Frames[0]) == 0 || sub.Frames[0][0] != 1 {
		t.Fatalf("want a subscription, got %v, %v", sub.Frames, err)
	}
	fmt.Println("start")
	for i := range n {
		if err := zc.SendMsg(zmq4.NewMsgFrom([]byte{}, SeqFrame(uint64(i)), payloads[i%len(payloads)])); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.w.Flush(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	nc.Close()
}
