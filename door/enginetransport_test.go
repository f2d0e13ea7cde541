package door

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pdrouter/pdrouter/door/doortest"
	"github.com/pdrouter/pdrouter/internal/rejects"
)

// engineTransportOf is the door's engine transport.
func engineTransportOf(t *testing.T, d *Door) *engineTransport {
	t.Helper()
	tr, ok := d.up.client.Transport.(*engineTransport)
	if !ok {
		t.Fatalf("the door's transport is %T", d.up.client.Transport)
	}
	return tr
}

// TestEngineTransportKeepsConnections: streamed requests one after
// another through the door use one connection to the engine: the relay
// reads each answer to its end, which returns the connection.
func TestEngineTransportKeepsConnections(t *testing.T) {
	eng := doortest.New(t, "d")
	r := newRig(t, []Decision{local(eng)}, nil)
	for range 5 {
		if resp, b := r.post("/v1/completions", `{"model":"m","prompt":[1,2],"stream":true}`); resp.StatusCode != 200 || !strings.Contains(string(b), "[DONE]") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	if n := engineTransportOf(t, r.door).dials.Load(); n != 1 {
		t.Fatalf("5 requests in turn opened %d connections to the engine, want 1", n)
	}
}

// TestEngineTransportRetriesAClosedIdleConnection: an engine that closed
// the door's idle connection (its keep-alive timeout, here right after
// each answer) costs the next request nothing: it goes out again on a new
// connection, and the client gets its answer with no retry on another
// worker.
func TestEngineTransportRetriesAClosedIdleConnection(t *testing.T) {
	stream := `data: {"object":"text_completion","choices":[{"index":0,"text":" a"}]}` + "\n\n" + "data: [DONE]\n\n"
	url := rawEngine(t, func(w *bufio.Writer) {
		w.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " + strconv.Itoa(len(stream)) + "\r\n\r\n" + stream)
	})
	r := newRig(t, []Decision{{Decode: Worker{ID: "d", HTTPURL: url}}}, nil)
	body := `{"model":"m","prompt":[1,2],"stream":true}`
	tr := engineTransportOf(t, r.door)
	for i := range 3 {
		resp, b := r.post("/v1/completions", body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), "[DONE]") {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		if i == 0 {
			tr.mu.Lock()
			idle := len(tr.idle[strings.TrimPrefix(url, "http://")])
			tr.mu.Unlock()
			if idle != 1 {
				t.Fatalf("%d idle connections after an answer read to its end, want 1", idle)
			}
		}
		time.Sleep(300 * time.Millisecond) // the engine closes the connection
	}
	if n := tr.dials.Load(); n != 3 {
		t.Fatalf("%d connections, want 3 (each closed one, then a new one)", n)
	}
	if n, err := testutil.GatherAndCount(r.reg, "pdrouter_door_retries_total"); err != nil || n != len(retryReasons) {
		t.Fatalf("pdrouter_door_retries_total: %d series (%v), want %d from the start", n, err, len(retryReasons))
	}
	if sumRetries(t, r.door.metrics.retries) != 0 {
		t.Fatal("a closed idle connection was taken for the worker's failure")
	}
}

// TestEngineTransportAfterTheEngineClosedEveryIdleConnection: an engine's
// keep-alive timeout (uvicorn's is 5 s) closes every idle connection of the
// door's pool at once. The request after such a pause must not fail on the
// first stale connection and then on the next: it goes out on a new one.
func TestEngineTransportAfterTheEngineClosedEveryIdleConnection(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/hold" {
			<-release
		}
		w.Write([]byte(`{"count":1}`))
	}))
	defer srv.Close()
	tr := &engineTransport{dial: (&net.Dialer{}).DialContext, firstByte: 5 * time.Second, maxHeaderBytes: DefaultMaxHeaderBytes, maxIdlePerHost: 4, idleTimeout: time.Minute}
	post := func(path string) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader([]byte(`{"prompt":"hi"}`)))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	// Three requests at once leave three idle connections in the pool.
	errs := make(chan error, 3)
	for range 3 {
		go func() { _, err := post("/hold"); errs <- err }()
	}
	for tr.dials.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	tr.mu.Lock()
	idle := len(tr.idle[strings.TrimPrefix(srv.URL, "http://")])
	tr.mu.Unlock()
	if idle != 3 {
		t.Fatalf("%d idle connections, want 3", idle)
	}
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	resp, err := post("/tokenize")
	if err != nil {
		t.Fatalf("the request after the engine closed its idle connections failed: %v", err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// rawServer serves each connection with serve, on its own goroutine, and
// returns the server's http URL: an engine that writes whatever bytes a test
// needs, framing errors included.
func rawServer(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// rawEngine answers each connection with answer, whatever it was asked.
func rawEngine(t *testing.T, answer func(w *bufio.Writer)) string {
	return rawServer(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		w := bufio.NewWriter(c)
		answer(w)
		_ = w.Flush()
		time.Sleep(100 * time.Millisecond)
	})
}

// TestEngineTransportBoundsHeaders: an engine that sends endless headers
// is refused once they pass --door-max-upstream-header-bytes, without
// waiting for their end, with an error that names the flag, counted as
// header_too_large; the request goes to another worker.
func TestEngineTransportBoundsHeaders(t *testing.T) {
	url := rawEngine(t, func(w *bufio.Writer) {
		w.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
		for range 1 << 10 {
			w.WriteString("X-Padding: " + strings.Repeat("p", 50) + "\r\n")
		}
		w.WriteString("\r\n")
	})
	r := newRig(t, []Decision{{Decode: Worker{ID: "d", HTTPURL: url}}}, nil, WithRetryBudget(0), WithMaxUpstreamHeaderBytes(8<<10))
	resp, b := r.post("/v1/completions", `{"model":"m","prompt":[1],"stream":true}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "over 8192 bytes (--door-max-upstream-header-bytes)") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if code, _, _ := openAIError(t, b); code != "upstream_header_too_large" {
		t.Fatalf("code %q", code)
	}
	if r.door.metrics.rejects.Value(rejects.DoorUpstream, reasonHeaderTooLarge) != 1 {
		t.Fatal("header_too_large not counted")
	}
	eng := doortest.New(t, "good")
	r = newRig(t, []Decision{{Decode: Worker{ID: "d", HTTPURL: url}}, local(eng)}, nil, WithMaxUpstreamHeaderBytes(8<<10))
	if resp, b := r.post("/v1/completions", `{"model":"m","prompt":[1],"stream":true}`); resp.StatusCode != 200 {
		t.Fatalf("not retried on another worker: %d %s", resp.StatusCode, b)
	}
}

// TestEngineTransportEarlyRefusal: an engine that refuses a request with
// an answer before reading its body, and closes, is answered as a
// refusal (its status and message), not as a broken connection.
func TestEngineTransportEarlyRefusal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		msg := `{"object":"error","message":"request body is larger than 1024 bytes","type":"invalid_request_error","code":413}`
		io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "+
			strconv.Itoa(len(msg))+"\r\n\r\n"+msg)
	}()
	tr := &engineTransport{dial: (&net.Dialer{}).DialContext, firstByte: 5 * time.Second, maxHeaderBytes: DefaultMaxHeaderBytes, maxIdlePerHost: 4, idleTimeout: time.Minute}
	// A body far over the socket buffers: the engine stops reading it.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+ln.Addr().String()+"/v1/completions",
		strings.NewReader(strings.Repeat("x", 32<<20)))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Skipf("the refusal was lost with the connection's reset (%v): the kernel dropped what the engine sent", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || !strings.Contains(string(b), "larger than") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// TestEngineTransportHTTPS: an https engine is served by net/http's
// Transport (the engine transport speaks plain HTTP only).
func TestEngineTransportHTTPS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	tr := &engineTransport{dial: (&net.Dialer{}).DialContext, firstByte: 5 * time.Second, maxHeaderBytes: DefaultMaxHeaderBytes, maxIdlePerHost: 4, idleTimeout: time.Minute,
		https: srv.Client().Transport}
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); string(b) != "ok" || tr.dials.Load() != 0 {
		t.Fatalf("%q, %d plain connections", b, tr.dials.Load())
	}
}

// lateReader is an https transport that answers at once and reads the
// request's body only when told to, as net/http's may when an engine
// answers before it has read the whole request.
type lateReader struct {
	read chan struct{}
	got  chan []byte
}

func (l lateReader) RoundTrip(req *http.Request) (*http.Response, error) {
	go func() {
		<-l.read
		b, _ := io.ReadAll(req.Body)
		req.Body.Close()
		l.got <- b
	}()
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// TestEngineTransportHTTPSBodyIsItsOwn: the door reuses a body's buffer once
// RoundTrip returns (bodybuf.go), so what net/http reads after that must be
// a copy: the engine gets the request it was sent, not the next one.
func TestEngineTransportHTTPSBodyIsItsOwn(t *testing.T) {
	late := lateReader{read: make(chan struct{}), got: make(chan []byte, 1)}
	tr := &engineTransport{dial: (&net.Dialer{}).DialContext, firstByte: 5 * time.Second, maxHeaderBytes: DefaultMaxHeaderBytes, maxIdlePerHost: 4, idleTimeout: time.Minute,
		https: late}
	buf := []byte(`{"prompt":[1,2,3]}`)
	req, _ := http.NewRequest(http.MethodPost, "https://engine.invalid/v1/completions", bytes.NewReader(buf))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	copy(buf, `{"prompt":[9,9,9]}`) // the buffer's next request
	close(late.read)
	if got := <-late.got; string(got) != `{"prompt":[1,2,3]}` {
		t.Fatalf("the https transport read %s, want the request it was given", got)
	}
}

// BenchmarkEngineTransport: one streamed completion (4 token chunks) from
// a loopback engine, read to its end, through net/http's Transport and
// through the door's engine transport: what each costs a request on the
// door's side of the engine connection. The parallel case runs 32 clients
// per core, as streams share the door's cores. (What the hand-offs cost a
// request's latency shows at a serving load, not at saturation, where a
// closed loop's latency is its clients over its throughput: bench door's
// "decision → request written to an engine" row.)
func BenchmarkEngineTransport(b *testing.B) {
	eng := doortest.New(b, "d")
	body := []byte(`{"model":"m","prompt":[1,2,3],"stream":true}`)
	dial := (&net.Dialer{}).DialContext
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"net-http", &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 64, ResponseHeaderTimeout: time.Minute, DisableCompression: true}},
		{"engine", &engineTransport{dial: dial, firstByte: time.Minute, maxHeaderBytes: DefaultMaxHeaderBytes, maxIdlePerHost: 64, idleTimeout: time.Minute}},
	} {
		client := &http.Client{Transport: c.rt}
		once := func() error {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, eng.URL()+"/v1/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := once(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"-parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := once(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// TestEngineTransportNoRetryOnTimeout: a reused connection whose engine
// does not answer within the first-byte bound is a slow worker, not a
// connection closed while idle: the request is not sent again (which
// would double the bound), and the client gets the timeout.
func TestEngineTransportNoRetryOnTimeout(t *testing.T) {
	stream := `data: {"object":"text_completion","choices":[{"index":0,"text":" a"}]}` + "\n\n" + "data: [DONE]\n\n"
	url := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for n := 0; ; n++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if n > 0 {
				time.Sleep(3 * time.Second) // the second request on a connection hangs
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: "+strconv.Itoa(len(stream))+"\r\n\r\n"+stream)
		}
	})
	r := newRig(t, []Decision{{Decode: Worker{ID: "d", HTTPURL: url}}}, nil,
		WithRetryBudget(0), WithUpstreamTimeouts(time.Second, 300*time.Millisecond, 10*time.Second))
	body := `{"model":"m","prompt":[1,2],"stream":true}`
	if resp, b := r.post("/v1/completions", body); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	resp, b := r.post("/v1/completions", body)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if n := engineTransportOf(t, r.door).dials.Load(); n != 1 {
		t.Fatalf("%d connections: the timed-out request was sent again", n)
	}
}

// FuzzEngineTransportAnswer: whatever bytes an engine answers with, the
// engine transport returns an error or a response whose body ends (with
// io.EOF or an error), with headers no larger than its bound, and nothing
// panics or hangs.
func FuzzEngineTransportAnswer(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"))
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 413 Too Large\r\nConnection: close\r\n\r\nno"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nx"))
	f.Add([]byte("HTTP/1.0 200 OK\r\n\r\nuntil close"))
	f.Fuzz(func(t *testing.T, answer []byte) {
		tr := &engineTransport{firstByte: 2 * time.Second, maxHeaderBytes: DefaultMaxHeaderBytes, maxIdlePerHost: 1, idleTimeout: time.Minute,
			dial: func(context.Context, string, string) (net.Conn, error) {
				door, engine := net.Pipe()
				go func() {
					defer engine.Close()
					_ = engine.SetDeadline(time.Now().Add(2 * time.Second))
					if _, err := http.ReadRequest(bufio.NewReader(engine)); err != nil {
						return
					}
					_, _ = engine.Write(answer)
				}()
				return door, nil
			}}
		req, _ := http.NewRequest(http.MethodPost, "http://engine/v1/completions", strings.NewReader(`{"prompt":[1]}`))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		size := 0
		for k, v := range resp.Header {
			size += len(k)
			for _, x := range v {
				size += len(x)
			}
		}
		if size > DefaultMaxHeaderBytes {
			t.Fatalf("%d bytes of headers read, over the bound", size)
		}
		if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)); err != nil && err.Error() == "" {
			t.Fatal("an error without a message")
		}
	})
}
