package door

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// engineTransport is the door's HTTP/1.1 client for engines' plain http
// URLs. net/http's Transport gives each connection a writer and a reader
// goroutine: the caller hands its request to the one and waits for the
// other to hand back the response headers. Those are two goroutine
// hand-offs on every request's way to its first token, and each is a wait
// for a core whenever an engine step wakes every stream at once. This
// transport writes the request and reads the response on the caller's
// goroutine (net/http's ReadResponse parses it, so framing and chunked
// decoding are net/http's), and keeps each engine's idle connections for
// the next request. https URLs go to net/http's Transport.
//
// A connection the engine closed while it sat idle fails the next request
// before any answer arrives; the request is then sent once more on a new
// connection, as net/http's Transport does for a connection it finds
// closed. Anything else that fails is the caller's to judge.
type engineTransport struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// firstByte bounds writing the request and reading the answer's
	// headers.
	firstByte time.Duration
	// maxHeaderBytes bounds an answer's headers (--door-max-upstream-header-bytes).
	maxHeaderBytes int64
	maxIdlePerHost int
	idleTimeout    time.Duration
	// https serves the engines whose URL is https.
	https http.RoundTripper

	mu        sync.Mutex
	idle      map[string][]*engineConn
	lastSweep time.Time
	// dials counts the connections opened (tests read it).
	dials atomic.Int64
}

// The engine transport's buffers (a 2000-token prompt goes in one write),
// and how many informational (1xx) answers may come before the final one.
const (
	engineWriteBuf   = 16 << 10
	engineReadBuf    = 4 << 10
	maxInformational = 8
)

// headerTooLargeError: an engine's answer headers over the bound.
type headerTooLargeError struct{ limit int64 }

func (e *headerTooLargeError) Error() string {
	return fmt.Sprintf("the engine's answer headers are over %d bytes (--door-max-upstream-header-bytes)", e.limit)
}

// engineConn is one connection to an engine.
type engineConn struct {
	c      net.Conn
	in     budgetReader
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time
}

// budgetReader reads r, counting what it read since its last reset, and
// fails once limit is spent (limit < 0: no limit).
type budgetReader struct {
	r     io.Reader
	n     int64
	limit int64
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.limit >= 0 {
		left := b.limit - b.n
		if left <= 0 {
			return 0, &headerTooLargeError{limit: b.limit}
		}
		if int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

// RoundTrip implements http.RoundTripper. It never reads req's body after
// it returns, whatever the scheme: the door reuses the body's buffer then
// (bodybuf.go).
func (t *engineTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" {
		// net/http's Transport may still be writing a body after its
		// RoundTrip returned (an engine that answered before reading it
		// all): it gets a copy of its own.
		req, err := withOwnBody(req)
		if err != nil {
			return nil, err
		}
		return t.https.RoundTrip(req)
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		ec, reused, err := t.conn(ctx, addr)
		if err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, err
		}
		resp, err := t.exchange(ctx, ec, addr, req)
		if err == nil {
			return resp, nil
		}
		replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
		if !reused || attempt > 0 || ec.in.n > 0 || ctx.Err() != nil || !replayable || !closedByPeer(err) {
			return nil, err
		}
		// The engine closed the idle connection before it read anything.
		// Its keep-alive timeout closes every connection that sat idle as
		// long, so the others of the pool are as stale: they are dropped,
		// and the request goes out once more on a new connection.
		t.dropIdle(addr)
		again := req.Clone(ctx)
		if req.GetBody != nil {
			if again.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		req = again
	}
}

// withOwnBody returns req with its body read into a buffer of its own,
// which nothing else refers to (req itself when it has no body).
func withOwnBody(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	own := req.Clone(req.Context())
	own.Body, own.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	own.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return own, nil
}

// closedByPeer: err is what a connection the other end closed gives (and
// not, say, a timeout: an engine that is slow to answer is not asked
// again, which would double the first-byte bound).
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// exchange sends req on ec and reads the answer's headers. On success the
// response's body owns ec: read to its end, it returns ec to the idle
// pool; closed before, it closes ec. On failure ec is closed.
func (t *engineTransport) exchange(ctx context.Context, ec *engineConn, addr string, req *http.Request) (*http.Response, error) {
	// Cancellation closes the connection, which ends a blocked write or
	// read at once; a closed connection is never reused.
	stop := context.AfterFunc(ctx, func() { ec.c.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		ec.c.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	ec.in.n, ec.in.limit = 0, -1
	_ = ec.c.SetDeadline(time.Now().Add(t.firstByte))
	// The body is written here, on the caller's goroutine, or abandoned
	// with the connection: RoundTrip never reads it after it returns, and
	// the door reuses its buffer then (bodybuf.go).
	werr := req.Write(ec.bw)
	if werr == nil {
		werr = ec.bw.Flush()
	}
	ec.in.limit = t.maxHeaderBytes
	resp, err := http.ReadResponse(ec.br, req)
	for i := 0; err == nil && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols && i < maxInformational; i++ {
		resp, err = http.ReadResponse(ec.br, req)
	}
	switch {
	case err != nil && werr != nil:
		return fail(werr)
	case err != nil:
		return fail(err)
	case resp.StatusCode < 200:
		return fail(fmt.Errorf("the engine answered %d and no final status", resp.StatusCode))
	}
	ec.in.limit = -1
	_ = ec.c.SetDeadline(time.Time{})
	// An engine that answered before it read the whole request (an early
	// refusal) leaves the connection out of step: it is not reused.
	body := &engineBody{t: t, ec: ec, addr: addr, rc: resp.Body, stop: stop, reuse: !resp.Close && werr == nil}
	if resp.Body == http.NoBody {
		body.finish(true)
		return resp, nil
	}
	resp.Body = body
	return resp, nil
}

// engineBody is an answer's body on its connection.
type engineBody struct {
	t     *engineTransport
	ec    *engineConn
	addr  string
	rc    io.ReadCloser
	stop  func() bool
	reuse bool
	// done: the connection was returned or closed. Close may come from
	// another goroutine while a Read blocks (a timer ending the stream).
	done atomic.Bool
}

func (b *engineBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		b.finish(err == io.EOF)
	}
	return n, err
}

// Close ends the body; before its end it closes the connection, which
// also ends a Read blocked on it.
func (b *engineBody) Close() error {
	b.finish(false)
	return nil
}

// finish returns the connection to the pool when the body was read to its
// end on a connection that stays in step, and closes it otherwise.
func (b *engineBody) finish(atEnd bool) {
	if !b.done.CompareAndSwap(false, true) {
		return
	}
	if b.stop() && atEnd && b.reuse && b.ec.br.Buffered() == 0 {
		b.t.put(b.addr, b.ec)
		return
	}
	b.ec.c.Close()
}

// conn is an idle connection to addr (reused true) or a new one.
func (t *engineTransport) conn(ctx context.Context, addr string) (*engineConn, bool, error) {
	now := time.Now()
	var stale []*engineConn
	t.mu.Lock()
	var ec *engineConn
	for l := t.idle[addr]; len(l) > 0 && ec == nil; l = t.idle[addr] {
		c := l[len(l)-1]
		l[len(l)-1] = nil
		t.idle[addr] = l[:len(l)-1]
		if now.Sub(c.idleAt) > t.idleTimeout {
			stale = append(stale, c)
			continue
		}
		ec = c
	}
	t.mu.Unlock()
	for _, c := range stale {
		c.c.Close()
	}
	if ec != nil {
		return ec, true, nil
	}
	c, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	t.dials.Add(1)
	ec = &engineConn{c: c, in: budgetReader{r: c, limit: -1}}
	ec.br = bufio.NewReaderSize(&ec.in, engineReadBuf)
	ec.bw = bufio.NewWriterSize(c, engineWriteBuf)
	return ec, false, nil
}

// dropIdle closes the idle connections kept for addr.
func (t *engineTransport) dropIdle(addr string) {
	t.mu.Lock()
	l := t.idle[addr]
	delete(t.idle, addr)
	t.mu.Unlock()
	for _, c := range l {
		c.c.Close()
	}
}

// put keeps ec for the next request to addr, and now and then closes the
// connections idle past the timeout (of engines no longer called too).
func (t *engineTransport) put(addr string, ec *engineConn) {
	now := time.Now()
	ec.idleAt = now
	var stale []*engineConn
	t.mu.Lock()
	kept := len(t.idle[addr]) < t.maxIdlePerHost
	if kept {
		if t.idle == nil {
			t.idle = map[string][]*engineConn{}
		}
		t.idle[addr] = append(t.idle[addr], ec)
	}
	if now.Sub(t.lastSweep) > t.idleTimeout {
		t.lastSweep = now
		for a, l := range t.idle {
			fresh := l[:0]
			for _, c := range l {
				if now.Sub(c.idleAt) > t.idleTimeout {
					stale = append(stale, c)
				} else {
					fresh = append(fresh, c)
				}
			}
			clear(l[len(fresh):])
			if len(fresh) == 0 {
				delete(t.idle, a)
			} else {
				t.idle[a] = fresh
			}
		}
	}
	t.mu.Unlock()
	if !kept {
		ec.c.Close()
	}
	for _, c := range stale {
		c.c.Close()
	}
}
