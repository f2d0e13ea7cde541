package ingest

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/internal/rejects"
)

// The hostile peers of these tests write ZMTP bytes built here by hand,
// independently of the codec under test, so a test cannot agree with a
// codec bug.

// testGreeting is a 64-byte ZMTP 3.0 greeting with the given mechanism.
func testGreeting(mechanism string) []byte {
	g := make([]byte, 64)
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = 3, 0
	copy(g[12:32], mechanism)
	return g
}

// testCommand is a command frame: name, then data, in a short or long frame
// as its size requires.
func testCommand(name string, data []byte) []byte {
	body := append([]byte{byte(len(name))}, name...)
	body = append(body, data...)
	return appendTestFrame(nil, 0x04, body)
}

// testProperty is one READY metadata property.
func testProperty(name, value string) []byte {
	p := append([]byte{byte(len(name))}, name...)
	p = binary.BigEndian.AppendUint32(p, uint32(len(value)))
	return append(p, value...)
}

// testHeader is a long frame header with flags and a declared size, without
// the body.
func testHeader(flags byte, size uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{flags | 0x02}, size)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

var goodPubHandshake = cat(testGreeting("NULL"), testCommand("READY", testProperty("Socket-Type", "PUB")))

// hostileCase is bytes a peer writes, and the refusal ingest must count.
type hostileCase struct {
	name   string
	bytes  []byte
	reason string
}

func hostileCases() []hostileCase {
	longValue := testProperty("Socket-Type", "PUB")
	binary.BigEndian.PutUint32(longValue[1+len("Socket-Type"):], 256) // declares 256 bytes, 3 follow
	truncated := testProperty("Socket-Type", "PUB")[:1+len("Socket-Type")+2] // half a value length
	badSig := testGreeting("NULL")
	badSig[9] = 0x00
	old := testGreeting("NULL")
	old[10] = 2
	return []hostileCase{
		{"truncated READY property", cat(testGreeting("NULL"), testCommand("READY", truncated)), "bad_handshake"},
		{"READY property value longer than the frame", cat(testGreeting("NULL"), testCommand("READY", longValue)), "bad_handshake"},
		{"READY property name past the frame", cat(testGreeting("NULL"), testCommand("READY", []byte{200, 'S'})), "bad_handshake"},
		{"command frame of 2^62 bytes", cat(testGreeting("NULL"), testHeader(0x04, 1<<62)), "frame_too_large"},
		{"command frame of 2^64-1 bytes", cat(testGreeting("NULL"), testHeader(0x04, ^uint64(0))), "frame_too_large"},
		{"message frame of 2^62 bytes", cat(goodPubHandshake, testHeader(0x00, 1<<62)), "frame_too_large"},
		{"message of 2^62 bytes after a MORE frame", cat(goodPubHandshake, appendTestFrame(nil, 0x01, []byte("kv@w")), testHeader(0x00, 1<<62)), "frame_too_large"},
		{"wrong signature", badSig, "bad_greeting"},
		{"HTTP instead of ZMTP", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + strings.Repeat(" ", 40)), "bad_greeting"},
		{"ZMTP 2", old, "bad_greeting"},
		{"wrong mechanism", testGreeting("CURVE"), "bad_greeting"},
		{"READY from a socket type that cannot publish", cat(testGreeting("NULL"), testCommand("READY", testProperty("Socket-Type", "REQ"))), "bad_handshake"},
		{"a message frame instead of READY", cat(testGreeting("NULL"), appendTestFrame(nil, 0x00, []byte("hi"))), "bad_handshake"},
		{"ERROR instead of READY", cat(testGreeting("NULL"), testCommand("ERROR", []byte("\x03bye"))), "bad_handshake"},
		{"reserved flag bits", cat(goodPubHandshake, appendTestFrame(nil, 0x80, []byte("x"))), "bad_frame"},
		{"command in the middle of a message", cat(goodPubHandshake, appendTestFrame(nil, 0x01, []byte("kv@w")), testCommand("PING", []byte{0, 0})), "bad_frame"},
	}
}

// peerClosed reads from nc until ingest closes it, failing the test if that
// does not happen within d.
func peerClosed(t *testing.T, nc net.Conn, d time.Duration) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(d))
	if _, err := io.Copy(io.Discard, nc); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("ingest kept the hostile connection open for %v", d)
		}
	}
}

// bindIngest runs ingest with a bound SUB and returns its address, sink and
// refusal counter.
func bindIngest(t *testing.T, cfg Config) (string, *memSink, *rejects.Counter) {
	t.Helper()
	reg := prometheus.NewRegistry()
	sink := &memSink{}
	ready := make(chan string, 1)
	cfg.Bind, cfg.BindTopic = "tcp://127.0.0.1:0", "kv@"
	cfg.Sources = append(cfg.Sources, SourceConfig{WorkerID: "w", Topic: "kv@w"})
	runIngest(t, cfg, Deps{Sink: sink, Registerer: reg, BindReady: func(a string) { ready <- a }})
	return <-ready, sink, rejects.For(reg)
}

// goodPublisher checks that a go-zeromq PUB connecting to addr gets its
// messages through ingest.
func goodPublisher(t *testing.T, addr string, sink *memSink) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx, zmq4.WithLogger(zmqLogger))
	defer pub.Close()
	if err := pub.Dial(addr); err != nil {
		t.Fatal(err)
	}
	pumpGoPub(t, pub, sink, 50)
}

// TestZMTPBindHostilePeers: each hostile peer connects to the bound SUB and
// writes its bytes; ingest counts the refusal, drops that connection, and
// keeps delivering a good publisher's messages.
func TestZMTPBindHostilePeers(t *testing.T) {
	for _, hc := range hostileCases() {
		t.Run(hc.name, func(t *testing.T) {
			addr, sink, rej := bindIngest(t, Config{})
			nc, err := net.Dial("tcp", strings.TrimPrefix(addr, "tcp://"))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			_, _ = nc.Write(hc.bytes)
			peerClosed(t, nc, 5*time.Second)
			waitFor(t, 5*time.Second, "the refusal counted as "+hc.reason, func() bool { return rej.Value(rejects.ZMQBind, hc.reason) == 1 })
			goodPublisher(t, addr, sink)
		})
	}
}
