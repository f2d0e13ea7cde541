package loadgen

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// conn is one closed-loop client's HTTP/1.1 keep-alive connection to the
// router, written for the load generator's hot loop.
//
// Why not net/http's client: the generator shares the machine (and, for
// the in-process bar, the process) with the router it measures, so every
// microsecond it spends is taken from the router. net/http's transport
// hands each request to two goroutines per connection (read and write
// loops), and copies a body through a freshly allocated 32 KiB buffer
// whenever it hides the body's WriterTo behind a LimitedReader, which it
// does for every request with a Content-Length. Profiles of `bench api`
// put ~15% of the process in that client. conn writes each request with
// one Write from a reused buffer and parses the response with
// http.ReadResponse on its own goroutine: the same wire protocol (keep-
// alive, Content-Length or chunked responses), without the hand-offs.
//
// A conn is used by one goroutine. Any error closes the connection; the
// next request dials again.
type conn struct {
	addr    string // host:port to dial
	host    string // Host header
	tlsConf *tls.Config
	timeout time.Duration

	c    net.Conn
	br   *bufio.Reader
	wbuf []byte
	rbuf []byte
}

// newConn returns a client for base, an http:// or https:// URL with no
// path (the router's), whose requests each get timeout to complete.
func newConn(base string, timeout time.Duration) (*conn, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("loadgen: router URL %q: %w", base, err)
	}
	k := &conn{host: u.Host, timeout: timeout}
	switch u.Scheme {
	case "http":
		k.addr = hostPort(u, "80")
	case "https":
		k.addr = hostPort(u, "443")
		k.tlsConf = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	default:
		return nil, fmt.Errorf("loadgen: router URL %q: want http:// or https://", base)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("loadgen: router URL %q: give the router's base URL, without a path", base)
	}
	return k, nil
}

// clone returns an unconnected conn to the same router, for another
// client goroutine.
func (k *conn) clone() *conn {
	return &conn{addr: k.addr, host: k.host, tlsConf: k.tlsConf, timeout: k.timeout}
}

func hostPort(u *url.URL, def string) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), def)
}

// post sends POST path with body head followed by body tail (either may be
// empty; together they are one JSON document) and returns the status and
// the response body, which is valid until the next call.
func (k *conn) post(path string, head, tail []byte) (int, []byte, error) {
	if k.c == nil {
		if err := k.dial(); err != nil {
			return 0, nil, err
		}
	}
	w := append(k.wbuf[:0], "POST "...)
	w = append(w, path...)
	w = append(w, " HTTP/1.1\r\nHost: "...)
	w = append(w, k.host...)
	w = append(w, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	w = strconv.AppendInt(w, int64(len(head)+len(tail)), 10)
	w = append(w, "\r\n\r\n"...)
	w = append(append(w, head...), tail...)
	k.wbuf = w
	_ = k.c.SetDeadline(time.Now().Add(k.timeout))
	if _, err := k.c.Write(w); err != nil {
		return 0, nil, k.fail(err)
	}
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return 0, nil, k.fail(err)
	}
	body, err := k.readBody(resp)
	if err != nil {
		return 0, nil, k.fail(err)
	}
	if resp.Close {
		k.close()
	}
	return resp.StatusCode, body, nil
}

// readBody reads the whole response body into the reused read buffer.
func (k *conn) readBody(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	if n := resp.ContentLength; n >= 0 {
		if n > 64<<20 {
			return nil, fmt.Errorf("loadgen: response body of %d bytes", n)
		}
		if int64(cap(k.rbuf)) < n {
			k.rbuf = make([]byte, n)
		}
		k.rbuf = k.rbuf[:n]
		_, err := io.ReadFull(resp.Body, k.rbuf)
		return k.rbuf, err
	}
	buf := bytes.NewBuffer(k.rbuf[:0])
	_, err := buf.ReadFrom(io.LimitReader(resp.Body, 64<<20))
	k.rbuf = buf.Bytes()
	return k.rbuf, err
}

func (k *conn) dial() error {
	d := net.Dialer{Timeout: k.timeout}
	c, err := d.Dial("tcp", k.addr)
	if err != nil {
		return err
	}
	if k.tlsConf != nil {
		tc := tls.Client(c, k.tlsConf)
		_ = tc.SetDeadline(time.Now().Add(k.timeout))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return err
		}
		c = tc
	}
	k.c, k.br = c, bufio.NewReaderSize(c, 16<<10)
	return nil
}

func (k *conn) fail(err error) error {
	k.close()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("loadgen: the router closed the connection: %w", err)
	}
	return err
}

func (k *conn) close() {
	if k.c != nil {
		_ = k.c.Close()
		k.c, k.br = nil, nil
	}
}
