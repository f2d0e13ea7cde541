package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// apiError is the API's error body.
type apiError struct {
	Error struct{ Code, Message, Field string } `json:"error"`
}

// wantError fails unless raw is the API's error shape with code and field
// and a message of at most maxMessage bytes (no error echoes unbounded
// input).
func wantError(t *testing.T, what string, status int, raw []byte, wantStatus int, code, field string) {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("%s: %d, body is not the JSON error shape: %v: %.300q", what, status, err, raw)
	}
	if status != wantStatus || e.Error.Code != code || e.Error.Field != field || e.Error.Message == "" {
		t.Fatalf("%s: got %d code=%q field=%q, want %d code=%q field=%q: %.300s", what, status, e.Error.Code, e.Error.Field, wantStatus, code, field, raw)
	}
	if len(raw) > 2048 {
		t.Fatalf("%s: the error answer is %d bytes; it quotes input unbounded: %.300s…", what, len(raw), raw)
	}
}

// afterKeys is an `after` vector of n distinct partition keys (the first
// dup of them repeated at the end when dup), as JSON.
func afterKeys(n int, dup bool) string {
	var b strings.Builder
	b.WriteString(`{"token_ids":[1,2,3],"after":{"kv-events":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%d":0`, i)
	}
	if dup {
		b.WriteString(`,"0":0`)
	}
	b.WriteString(`}}}`)
	return b.String()
}

// TestAfterKeysAreBoundedAndLinear: a body of ~1 MB of `after` partition
// keys is refused at once with a short 422, and a duplicate key anywhere,
// on the fast or the encoding/json path, is 400 duplicate_key.
func TestAfterKeysAreBoundedAndLinear(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{apiOpts: []api.Option{api.WithAfterTimeout(200 * time.Millisecond)}})
	fleet(h)

	many := afterKeys(120_000, false) // ~1.2 MB
	start := time.Now()
	code, _, raw := h.do("POST", "/v1/route", many, nil)
	took := time.Since(start)
	wantError(t, "120k after keys", code, raw, 422, "invalid_value", "after")
	if took > 10*time.Second { // generous: a shared machine; the old quadratic check took minutes
		t.Fatalf("120k after keys took %s to refuse", took)
	}

	for _, c := range []struct{ name, body, field string }{
		{"top-level", `{"token_ids":[1],"token_ids":[2,3]}`, "token_ids"},
		{"after topic", `{"after":{"load":{"0":1}},"after":{"kv-events":{"1":2}},"token_ids":[1]}`, "after"},
		{"after partition", `{"after":{"load":{"0":1,"0":2}},"token_ids":[1]}`, "after.load.0"},
		{"slow path (escaped key)", `{"request_id":"a\u0062","after":{"load":{"0":1,"0":2}},"token_ids":[1]}`, "after.load.0"},
		{"many keys then a duplicate", afterKeys(900, true), "after.kv-events.0"},
	} {
		start := time.Now()
		code, _, raw := h.do("POST", "/v1/route", c.body, nil)
		wantError(t, c.name, code, raw, 400, "duplicate_key", c.field)
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("%s took %s", c.name, took)
		}
	}
	// A duplicate in an ingest body too (encoding/json alone took the last).
	code, _, raw = h.do("POST", "/v1/events/load", `{"worker_id":"decode-1","worker_id":"decode-2","kv_usage_ratio":0.5}`, nil)
	wantError(t, "ingest duplicate", code, raw, 400, "duplicate_key", "worker_id")
}

// TestErrorsQuoteInputBounded: a long unknown key or after topic is named
// in the error, shortened.
func TestErrorsQuoteInputBounded(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{})
	long := strings.Repeat("k", 100_000)
	code, _, raw := h.do("POST", "/v1/route", `{"token_ids":[1],"`+long+`":1}`, nil)
	var e apiError
	_ = json.Unmarshal(raw, &e)
	if code != 400 || e.Error.Code != "unknown_field" || len(raw) > 2048 {
		t.Fatalf("long unknown key: %d, %d bytes: %.200s", code, len(raw), raw)
	}
	code, _, raw = h.do("POST", "/v1/route", `{"token_ids":[1],"after":{"`+long+`":{"0":1}}}`, nil)
	_ = json.Unmarshal(raw, &e)
	if code != 422 || e.Error.Code != "invalid_value" || len(raw) > 2048 {
		t.Fatalf("long after topic: %d, %d bytes: %.200s", code, len(raw), raw)
	}
}

// TestRouteValueGaps: values encoding/json decodes but the route must
// refuse.
func TestRouteValueGaps(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{})
	after := fleet(h)
	for _, c := range []struct {
		name, body  string
		status      int
		code, field string
	}{
		{"after offset MaxInt64", `{"token_ids":[1],"after":{"kv-events":{"0":9223372036854775807}}}`, 422, "invalid_value", "after.kv-events.0"},
		{"negative prompt_tokens", `{"block_hashes":[1],"block_size":16,"prompt_tokens":-5}`, 422, "invalid_value", "prompt_tokens"},
		{"case-folded key", `{"Token_IDs":[1,2,3]}`, 400, "unknown_field", "Token_IDs"},
		{"case-folded nested key", `{"token_ids":[1],"AFTER":{}}`, 400, "unknown_field", "AFTER"},
		{"empty token_ids", `{"token_ids":[]}`, 422, "invalid_value", "token_ids"},
		{"empty token_ids, slow path", `{"request_id":"e\u0062","token_ids":[]}`, 422, "invalid_value", "token_ids"},
	} {
		code, _, raw := h.do("POST", "/v1/route", c.body, nil)
		wantError(t, c.name, code, raw, c.status, c.code, c.field)
	}
	// One request_id, two different requests: the second is a conflict,
	// not the first's decision.
	body := func(id string, toks []uint32, model string) map[string]any {
		m := map[string]any{"request_id": id, "token_ids": toks, "after": after}
		if model != "" {
			m["model"] = model
		}
		return m
	}
	var first routeResp
	h.mustDo(http.StatusOK, "POST", "/v1/route", body("same", tokens(40, 0), ""), &first)
	var again routeResp
	h.mustDo(http.StatusOK, "POST", "/v1/route", body("same", tokens(40, 0), "m"), &again)
	if !again.Idempotent || again.DecisionID != first.DecisionID {
		t.Fatalf("the same request again: %+v, first %+v", again, first)
	}
	code, _, raw := h.do("POST", "/v1/route", body("same", tokens(40, 1), ""), nil)
	wantError(t, "same id, other prompt", code, raw, 409, "request_id_conflict", "request_id")
	code, _, raw = h.do("POST", "/v1/route", map[string]any{"request_id": "same", "block_hashes": []uint64{1, 2}, "block_size": 16, "prompt_tokens": 40}, nil)
	wantError(t, "same id, hashes", code, raw, 409, "request_id_conflict", "request_id")
	code, _, raw = h.do("POST", "/v1/route", body("same", tokens(40, 0), "other"), nil)
	wantError(t, "same id, other model", code, raw, 409, "request_id_conflict", "request_id")
}

// TestPathsAndMethodsAnswerJSON: no path gets Gin's or Go's redirect, and
// with a token an unknown path or method is 401 before it is 404 or 405.
func TestPathsAndMethodsAnswerJSON(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{apiOpts: []api.Option{api.WithAuthToken("s3cret")}})
	noRedirect := &http.Client{Timeout: 10 * time.Second, Transport: h.client.Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path string, token bool) (int, []byte) {
		req, _ := http.NewRequest(method, h.srv.URL+path, nil)
		if token {
			req.Header.Set("Authorization", "Bearer s3cret")
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, raw
	}
	for _, path := range []string{"/healthz/", "/v1/workers/", "/V1/workers", "/v1//workers", "/v1/./workers"} {
		code, raw := send("GET", path, true)
		wantError(t, "GET "+path, code, raw, 404, "no_route", "")
	}
	for _, c := range []struct{ method, path string }{{"GET", "/v2/route"}, {"PUT", "/v1/route"}, {"GET", "/v1/workers/"}} {
		code, raw := send(c.method, c.path, false)
		wantError(t, "no token "+c.method+" "+c.path, code, raw, 401, "unauthorized", "")
	}
	code, raw := send("PUT", "/v1/route", true)
	wantError(t, "PUT with token", code, raw, 405, "method_not_allowed", "")
	if code, _ := send("GET", "/healthz", false); code != 200 {
		t.Fatalf("healthz: %d", code)
	}
}

// rawRequest writes a POST /v1/route head declaring contentLength (or
// chunked when negative) plus extra header lines.
func rawRequest(contentLength int, extra ...string) string {
	var b strings.Builder
	b.WriteString("POST /v1/route HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
	if contentLength >= 0 {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", contentLength)
	}
	for _, e := range extra {
		b.WriteString(e + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// readResponse reads one response from conn within d.
func readResponse(t *testing.T, conn net.Conn, d time.Duration) (*http.Response, []byte, error) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, nil, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, raw, err
}

// TestHeadersOverLimitAnswerJSON431: headers over the configured limit get
// the API's error shape (within what the http.Server lets through).
func TestHeadersOverLimitAnswerJSON431(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{apiOpts: []api.Option{api.WithMaxHeaderBytes(8 << 10)}})
	conn, err := net.Dial("tcp", h.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, rawRequest(2, "X-Pad: "+strings.Repeat("p", 12<<10))+"{}"); err != nil {
		t.Fatal(err)
	}
	resp, raw, err := readResponse(t, conn, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, "12 KB of headers", resp.StatusCode, raw, 431, "headers_too_large", "")
}

// TestIdleBodiesDoNotHoldMemory: many requests that declare large bodies and
// send a few bytes hold memory for what arrived, not for what they declared.
func TestIdleBodiesDoNotHoldMemory(t *testing.T) {
	brokers := kafkatest.Fake(t)
	const limit = 8 << 20
	h := newHarness(t, brokers, harnessOpt{apiOpts: []api.Option{api.WithBodyLimit(limit), api.WithReadTimeout(time.Minute)}})
	addr := h.srv.Listener.Addr().String()
	const n = 40
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, rawRequest(limit-1)+`{"token_ids":[`); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	time.Sleep(time.Second) // every handler is now reading its body
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	grew := int64(during.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew %d KiB for %d idle requests declaring %d MiB", grew>>10, n, limit>>20)
	if grew > 32<<20 {
		t.Fatalf("heap grew %d MiB for %d idle requests: bodies are allocated before they arrive", grew>>20, n)
	}
}

// TestSlowBodiesTimeOut: a body that stops arriving, or trickles in a byte
// at a time, is answered 408 (or closed when no answer is possible) once the
// read timeout passes, and counted.
func TestSlowBodiesTimeOut(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{apiOpts: []api.Option{api.WithReadTimeout(time.Second)}})
	const n = 3
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", h.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, rawRequest(1<<20)+`{"token_ids":[`); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	// Slowloris: one byte every 200 ms never completes the body.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer func() { close(stop); wg.Wait() }()
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				_, _ = conns[0].Write([]byte("1"))
			}
		}
	})
	start := time.Now()
	for _, c := range conns {
		resp, raw, err := readResponse(t, c, 20*time.Second)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("no answer and no close %s after the body stopped: %v", time.Since(start), err)
			}
			continue // closed: the answer was no longer possible
		}
		wantError(t, "idle body", resp.StatusCode, raw, http.StatusRequestTimeout, "request_timeout", "")
	}
	metrics := string(h.mustDo(http.StatusOK, "GET", "/metrics", nil, nil))
	if !strings.Contains(metrics, fmt.Sprintf(`pdrouter_rejected_total{entry="http",reason="read_timeout"} %d`, n)) {
		t.Fatalf("read timeouts not counted:\n%s", grepLines(metrics, "pdrouter_rejected_total"))
	}
}

// TestOversizedBodyGets413NotReset: a client that writes its whole body
// before reading (as simple clients do) reads the 413 for a body over the
// limit, even when the socket buffers cannot absorb the excess.
func TestOversizedBodyGets413NotReset(t *testing.T) {
	brokers := kafkatest.Fake(t)
	// Go's server itself drains up to 256 KiB left unread by a handler:
	// the excess here is more.
	const limit = 1 << 20
	// Small socket buffers on the server's side, so the excess cannot
	// sit in the kernel while the server answers.
	h := newHarness(t, brokers, harnessOpt{apiOpts: []api.Option{api.WithBodyLimit(limit)},
		listener: func(l net.Listener) net.Listener { return smallBuffers{l} }})
	for _, declared := range []bool{true, false} {
		c, err := net.Dial("tcp", h.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetWriteBuffer(16 << 10)
		body := `{"token_ids":[` + strings.Repeat("1,", (limit+limit/2)/2) + `1]}`
		head := rawRequest(len(body))
		if !declared {
			head = rawRequest(-1, "Transfer-Encoding: chunked")
			body = fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
		}
		_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.Copy(c, io.MultiReader(strings.NewReader(head), strings.NewReader(body))); err != nil {
			t.Fatalf("declared=%v: writing a body 1.5x the limit: %v (the server reset the connection)", declared, err)
		}
		resp, raw, err := readResponse(t, c, 20*time.Second)
		c.Close()
		if err != nil {
			t.Fatalf("declared=%v: reading the answer: %v", declared, err)
		}
		wantError(t, "oversized body", resp.StatusCode, raw, 413, "body_too_large", "")
	}
}

// TestOversizedBodyWithExpectContinue: a client that waits for 100
// Continue before sending a body declared over the limit gets the 413 and
// never sends it.
func TestOversizedBodyWithExpectContinue(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{apiOpts: []api.Option{api.WithBodyLimit(1 << 20)}})
	c, err := net.Dial("tcp", h.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, rawRequest(3<<19, "Expect: 100-continue")); err != nil {
		t.Fatal(err)
	}
	resp, raw, err := readResponse(t, c, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, "declared 1.5 MiB, expecting 100-continue", resp.StatusCode, raw, 413, "body_too_large", "")
}

// smallBuffers gives accepted connections a small receive buffer.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(16 << 10)
	}
	return c, err
}

// TestRefusalsAreCounted: every refusal is counted by its code, and the
// series exist at 0 before the first.
func TestRefusalsAreCounted(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{apiOpts: []api.Option{api.WithBodyLimit(4096)}})
	metrics := string(h.mustDo(http.StatusOK, "GET", "/metrics", nil, nil))
	for _, reason := range []string{"body_too_large", "headers_too_large", "read_timeout", "malformed_json", "duplicate_key",
		"unknown_field", "invalid_value", "request_id_conflict", "no_route", "method_not_allowed", "unauthorized"} {
		if !strings.Contains(metrics, fmt.Sprintf(`pdrouter_rejected_total{entry="http",reason=%q} 0`, reason)) {
			t.Errorf("reason %s is not initialized at 0", reason)
		}
	}
	h.do("POST", "/v1/route", `{"token_ids":[1`, nil)
	h.do("POST", "/v1/route", `{"token_ids":[1],"token_ids":[1]}`, nil)
	h.do("POST", "/v1/route", `{"token_ids":[1],"Model":"m"}`, nil)
	h.do("POST", "/v1/route", `{"token_ids":[`+strings.Repeat("1,", 4096)+`1]}`, nil)
	h.do("GET", "/nope", nil, nil)
	metrics = string(h.mustDo(http.StatusOK, "GET", "/metrics", nil, nil))
	for _, reason := range []string{"malformed_json", "duplicate_key", "unknown_field", "body_too_large", "no_route"} {
		if !strings.Contains(metrics, fmt.Sprintf(`pdrouter_rejected_total{entry="http",reason=%q} 1`, reason)) {
			t.Errorf("reason %s not counted once:\n%s", reason, grepLines(metrics, "pdrouter_rejected_total"))
		}
	}
}

func grepLines(s, sub string) string {
	var out bytes.Buffer
	for line := range strings.SplitSeq(s, "\n") {
		if strings.Contains(line, sub) {
			out.WriteString(line + "\n")
		}
	}
	return out.String()
}
