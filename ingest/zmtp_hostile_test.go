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
	"github.com/go-zeromq/zmq4/security/null"
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
	binary.BigEndian.PutUint32(longValue[1+len("Socket-Type"):], 256)        // declares 256 bytes, 3 follow
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
// messages through ingest. It dials until ingest takes the connection.
func goodPublisher(t *testing.T, addr string, sink *memSink) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx, zmq4.WithLogger(ZMQLogger(nil)))
	defer pub.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := pub.Dial(addr)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
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

// TestZMTPBindHandshakeTimeout: a peer that connects and stops inside the
// handshake (after its greeting, or before any byte) is dropped after the
// handshake timeout and counted; a good publisher still gets through.
func TestZMTPBindHandshakeTimeout(t *testing.T) {
	for name, b := range map[string][]byte{"silent": nil, "greeting only": testGreeting("NULL"), "half a greeting": testGreeting("NULL")[:20]} {
		t.Run(name, func(t *testing.T) {
			addr, sink, rej := bindIngest(t, Config{ZMTP: ZMTPLimits{HandshakeTimeout: 300 * time.Millisecond}})
			nc, err := net.Dial("tcp", strings.TrimPrefix(addr, "tcp://"))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			_, _ = nc.Write(b)
			start := time.Now()
			peerClosed(t, nc, 5*time.Second)
			if d := time.Since(start); d < 200*time.Millisecond {
				t.Errorf("dropped after %v, before the handshake timeout", d)
			}
			waitFor(t, 5*time.Second, "the refusal counted", func() bool { return rej.Value(rejects.ZMQBind, reasonHandshakeTimeout) == 1 })
			goodPublisher(t, addr, sink)
		})
	}
}

// TestZMTPBindTooManyConnections: with --zmq-max-conns 2 and two peers
// holding their connections, a third is closed at once and counted; once
// they leave, a good publisher gets through.
func TestZMTPBindTooManyConnections(t *testing.T) {
	addr, sink, rej := bindIngest(t, Config{ZMTP: ZMTPLimits{MaxConns: 2}})
	hostPort := strings.TrimPrefix(addr, "tcp://")
	var holders []net.Conn
	for range 2 {
		nc, err := net.Dial("tcp", hostPort)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		holders = append(holders, nc)
		// The greeting that comes back shows the connection holds a slot.
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(nc, make([]byte, 64)); err != nil {
			t.Fatalf("connection %d got no greeting: %v", len(holders), err)
		}
	}
	extra, err := net.Dial("tcp", hostPort)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	peerClosed(t, extra, 5*time.Second)
	waitFor(t, 5*time.Second, "the refusal counted", func() bool { return rej.Value(rejects.ZMQBind, reasonTooManyConns) == 1 })
	for _, nc := range holders {
		nc.Close()
	}
	// The slots come free as ingest notices the closes, in its own time: a
	// publisher that dials before then is refused like the extra one, and
	// dials again, as engines do.
	goodPublisher(t, addr, sink)
}

// fakeEngine listens like an engine's PUB: the first connection gets the
// hostile bytes (and is closed when ingest drops it), every later one is a
// go-zeromq PUB connection that publishes increasing seqs until the test
// ends.
func fakeEngine(t *testing.T, hostile []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); ln.Close() })
	go func() {
		for first := true; ; first = false {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			context.AfterFunc(ctx, func() { nc.Close() })
			if first {
				go func() {
					defer nc.Close()
					_, _ = nc.Write(hostile)
					_, _ = io.Copy(io.Discard, nc)
				}()
				continue
			}
			go func() {
				defer nc.Close()
				zc, err := zmq4.Open(nc, null.Security(), zmq4.Pub, zmq4.SocketIdentity(""), true, nil)
				if err != nil {
					return
				}
				for seq := uint64(0); ctx.Err() == nil; seq++ {
					if zc.SendMsg(zmq4.NewMsgFrom([]byte("kv@w"), SeqFrame(seq), seqPayload(t, seq))) != nil {
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
	}()
	return "tcp://" + ln.Addr().String()
}

// TestZMTPDialHostilePublisher: an endpoint named by a registration answers
// ingest's dial with hostile bytes; ingest counts the refusal (zmq_dial),
// redials, and ingests what the endpoint publishes once it behaves.
func TestZMTPDialHostilePublisher(t *testing.T) {
	for _, hc := range hostileCases() {
		t.Run(hc.name, func(t *testing.T) {
			ep := fakeEngine(t, hc.bytes)
			reg := prometheus.NewRegistry()
			sink := &memSink{}
			runIngest(t, Config{ReconnectInterval: 50 * time.Millisecond, Sources: []SourceConfig{{WorkerID: "w", Endpoint: ep, Topic: "kv@"}}},
				Deps{Sink: sink, Registerer: reg})
			waitFor(t, 10*time.Second, "batches from the engine once it behaves", func() bool { return len(sink.kv()) >= 4 })
			if got := rejects.For(reg).Value(rejects.ZMQDial, hc.reason); got != 1 {
				t.Errorf("zmq_dial %s counted %v times, want 1", hc.reason, got)
			}
		})
	}
}

// TestZMTPReplayHostileRouter: an engine's replay endpoint that answers the
// DEALER with hostile bytes fails that replay with a counted refusal
// (zmq_dial), and nothing else.
func TestZMTPReplayHostileRouter(t *testing.T) {
	goodRouter := cat(testGreeting("NULL"), testCommand("READY", cat(testProperty("Socket-Type", "ROUTER"), testProperty("Identity", ""))))
	cases := []hostileCase{
		{"truncated READY property", cat(testGreeting("NULL"), testCommand("READY", testProperty("Socket-Type", "ROUTER")[:14])), "bad_handshake"},
		{"command frame of 2^62 bytes", cat(testGreeting("NULL"), testHeader(0x04, 1<<62)), "frame_too_large"},
		{"reply frame of 2^62 bytes", cat(goodRouter, appendTestFrame(nil, 0x01, nil), testHeader(0x00, 1<<62)), "frame_too_large"},
		{"a PUB where a ROUTER should be", goodPubHandshake, "bad_handshake"},
		{"wrong mechanism", testGreeting("PLAIN"), "bad_greeting"},
	}
	for _, hc := range cases {
		t.Run(hc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				nc, err := ln.Accept()
				if err != nil {
					return
				}
				defer nc.Close()
				_, _ = nc.Write(hc.bytes)
				_, _ = io.Copy(io.Discard, nc)
			}()
			rej := rejects.For(prometheus.NewRegistry())
			z := ZMQReplayer{guard: newConnGuard(ZMTPLimits{}, rej, nil, quietLog())}
			n := 0
			err = z.Replay(context.Background(), "tcp://"+ln.Addr().String(), 0, 5*time.Second, func(Message) bool { n++; return true })
			if err == nil || n != 0 {
				t.Fatalf("replay: %d messages, err %v; want an error and none", n, err)
			}
			if got := rej.Value(rejects.ZMQDial, hc.reason); got != 1 {
				t.Errorf("zmq_dial %s counted %v times, want 1 (err %v)", hc.reason, got, err)
			}
		})
	}
}

// TestZMTPConnPanicRecovered: a panic while serving one bound connection
// (here from the message handler, standing in for any bug a peer's bytes
// could reach) drops that connection, is counted, and the bound SUB keeps
// serving the next publisher.
func TestZMTPConnPanicRecovered(t *testing.T) {
	m := NewMetrics(nil)
	g := newConnGuard(ZMTPLimits{}, rejects.For(nil), m.ConnPanics, quietLog())
	got := make(chan string, 4)
	out := func(r received) error {
		if string(r.msg.Payload) == "boom" {
			panic("handler bug")
		}
		got <- string(r.msg.Payload)
		return nil
	}
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- subscribeBind(ctx, "tcp://127.0.0.1:0", "", g, out, func(error) {}, func(a string) { ready <- a })
	}()
	defer func() { cancel(); <-done }()
	addr := strings.TrimPrefix(<-ready, "tcp://")
	publish := func(payload string) net.Conn {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		msg := cat(appendTestFrame(nil, 0x01, []byte("kv@w")), appendTestFrame(nil, 0x01, SeqFrame(1)), appendTestFrame(nil, 0x00, []byte(payload)))
		if _, err := nc.Write(cat(goodPubHandshake, msg)); err != nil {
			t.Fatal(err)
		}
		return nc
	}
	bad := publish("boom")
	defer bad.Close()
	peerClosed(t, bad, 5*time.Second)
	// The connection closes as the panic unwinds; the count follows in the
	// recovering goroutine.
	waitFor(t, 5*time.Second, "one recovered panic counted", func() bool {
		return counterValue(t, m.ConnPanics.WithLabelValues("zmq_bind")) == 1
	})
	good := publish("fine")
	defer good.Close()
	select {
	case p := <-got:
		if p != "fine" {
			t.Fatalf("got %q", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the next publisher's message did not arrive")
	}
}
