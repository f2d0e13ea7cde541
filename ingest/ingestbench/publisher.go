package ingestbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"

	"github.com/pdrouter/pdrouter/ingest"
)

// The engine publisher of a run. It is meant to run in its own process, as
// engines do, so the ingest process's CPU is its own and the two do not
// compete inside one Go runtime. It is a ZMTP PUB connection (go-zeromq's
// Conn) written through an 8 KiB buffer, which is how libzmq's I/O thread
// writes a busy socket (many messages per write syscall); go-zeromq's own
// PUB socket makes a write syscall per frame, and then the publisher, not
// ingest, is what is measured.
//
// The protocol with the parent, on the publisher's stdout and stdin (the
// same as testdata/bench_pub.py's, the pyzmq publisher of the ingest
// tests): print "addr <endpoint>", wait for ingest's subscription, print
// "start", send [topic "", seq, payload] for seqs 0..Messages-1 cycling
// through Payloads(EventsPerMessage), and stay up until stdin closes, so
// nothing is cut off before ingest has read it.

// PublisherConfig is one publisher's work.
type PublisherConfig struct {
	// Listen is the TCP address to bind; default 127.0.0.1:0.
	Listen           string
	EventsPerMessage int
	Messages         int
}

// ServePublisher is the publisher process: `pdrouter bench
// ingest-publisher` runs it with the process's stdin and stdout.
func ServePublisher(ctx context.Context, cfg PublisherConfig, stdin io.Reader, stdout io.Writer) error {
	if cfg.EventsPerMessage < 1 || cfg.Messages < 1 {
		return errors.New("publisher: need at least one event per message and one message")
	}
	p, err := listen(cfg.Listen)
	if err != nil {
		return err
	}
	defer p.close()
	if _, err := fmt.Fprintf(stdout, "addr %s\n", p.endpoint()); err != nil {
		return err
	}
	err = p.send(ctx, Payloads(cfg.EventsPerMessage), cfg.Messages, func() { _, _ = fmt.Fprintln(stdout, "start") })
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, stdin)
	return nil
}

// pub is a bound publisher with at most one subscriber. close may come
// from another goroutine (a cancelled context, an in-process stop) while
// send runs.
type pub struct {
	ln   net.Listener
	mu   sync.Mutex
	conn net.Conn
}

func listen(addr string) (*pub, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}
	return &pub{ln: ln}, nil
}

func (p *pub) endpoint() string { return "tcp://" + p.ln.Addr().String() }

// send accepts one subscriber, waits for its subscription, calls started,
// and sends seqs 0..n-1 cycling through payloads. The connection stays
// open until close.
func (p *pub) send(ctx context.Context, payloads [][]byte, n int, started func()) error {
	unblock := context.AfterFunc(ctx, p.close)
	defer unblock()
	nc, err := p.ln.Accept()
	if err != nil {
		return fmt.Errorf("publisher: accept: %w", err)
	}
	p.mu.Lock()
	p.conn = nc
	p.mu.Unlock()
	conn := &flushOnReadConn{Conn: nc, w: bufio.NewWriterSize(nc, 8<<10)}
	zc, err := zmq4.Open(conn, null.Security(), zmq4.Pub, zmq4.SocketIdentity(""), true, nil)
	if err != nil {
		return fmt.Errorf("publisher: ZMTP handshake: %w", err)
	}
	sub, err := zc.RecvMsg()
	if err != nil {
		return fmt.Errorf("publisher: waiting for the subscription: %w", err)
	}
	if len(sub.Frames) != 1 || len(sub.Frames[0]) == 0 || sub.Frames[0][0] != 1 {
		return fmt.Errorf("publisher: want a subscription, got %q", sub.Frames)
	}
	started()
	for i := range n {
		if err := zc.SendMsg(zmq4.NewMsgFrom([]byte{}, ingest.SeqFrame(uint64(i)), payloads[i%len(payloads)])); err != nil {
			return fmt.Errorf("publisher: send seq %d: %w", i, err)
		}
	}
	if err := conn.w.Flush(); err != nil {
		return fmt.Errorf("publisher: flush: %w", err)
	}
	return nil
}

func (p *pub) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		_ = p.conn.Close()
	}
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
