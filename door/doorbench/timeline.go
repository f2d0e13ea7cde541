package doorbench

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// timeline stamps where a request through the door is on its way to the
// first token, at the points the bench sees from outside the door: its
// decision asked for (the decider is the bench's), its request's first
// bytes written to the engine, and the engine's first chunk read back
// (the door's connections are the bench's, through WithDialer; a request
// is known by the X-Request-Id the door sends, and HTTP/1.1 carries one
// request at a time on a connection). With the client's send and
// first-token times they split the door's TTFT: client to decision (the
// HTTP server, the body's read and parse), decision to engine (the
// decision, the body's rendering, the HTTP client's hand-off to its
// writer), the engine's own TTFT, and the relay of the first chunk to the
// client.
type timeline struct {
	mu sync.Mutex
	m  map[string]*stamps
}

type stamps struct{ decided, upstream, firstChunk time.Time }

func newTimeline() *timeline { return &timeline{m: map[string]*stamps{}} }

func (t *timeline) get(id string) *stamps {
	s := t.m[id]
	if s == nil {
		s = &stamps{}
		t.m[id] = s
	}
	return s
}

func (t *timeline) decided(id string) {
	now := time.Now()
	t.mu.Lock()
	t.get(id).decided = now
	t.mu.Unlock()
}

var requestIDHeader = []byte("\r\nX-Request-Id: ")

// wrote stamps the request whose header p carries, the first time, and
// returns its id ("" when p carries none).
func (t *timeline) wrote(p []byte) string {
	now := time.Now()
	i := bytes.Index(p, requestIDHeader)
	if i < 0 {
		return ""
	}
	rest := p[i+len(requestIDHeader):]
	j := bytes.IndexByte(rest, '\r')
	if j < 0 {
		return ""
	}
	id := string(rest[:j])
	t.mu.Lock()
	if s := t.get(id); s.upstream.IsZero() {
		s.upstream = now
	}
	t.mu.Unlock()
	return id
}

var firstEvent = []byte("data: {")

// read stamps request id's first chunk when p holds it.
func (t *timeline) read(id string, p []byte) {
	if id == "" || !bytes.Contains(p, firstEvent) {
		return
	}
	now := time.Now()
	t.mu.Lock()
	if s := t.get(id); s.firstChunk.IsZero() {
		s.firstChunk = now
	}
	t.mu.Unlock()
}

// lookup returns the stamps of request id.
func (t *timeline) lookup(id string) (stamps, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[id]
	if !ok {
		return stamps{}, false
	}
	return *s, true
}

// dialer counts the door's connections in n and stamps their writes.
func (t *timeline) dialer(n *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.Add(1)
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &stampingConn{Conn: c, t: t}, nil
	}
}

// stampingConn stamps the requests written on it and their first chunks
// read. Its writes and reads run on the HTTP client's two goroutines.
type stampingConn struct {
	net.Conn
	t  *timeline
	id atomic.Pointer[string] // the request on the connection
}

func (c *stampingConn) Write(p []byte) (int, error) {
	if id := c.t.wrote(p); id != "" {
		c.id.Store(&id)
	}
	return c.Conn.Write(p)
}

func (c *stampingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if id := c.id.Load(); id != nil && n > 0 {
		c.t.read(*id, p[:n])
	}
	return n, err
}
