package door

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/pdrouter/pdrouter/door/doortest"
)

// relayFrom relays body (an engine's event stream) to a counting client.
func relayFrom(t *testing.T, body io.Reader, req *request) (*countingWriter, *failure) {
	t.Helper()
	d, err := New(Deps{Decider: &fakeDecider{}, Fleet: fakeFleet{}, Outcomes: &fakeOutcomes{}})
	if err != nil {
		t.Fatal(err)
	}
	gin.SetMode(gin.ReleaseMode)
	w := &countingWriter{h: http.Header{}, keep: true}
	c, _ := gin.CreateTestContext(w)
	c.Request = httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(body)}
	return w, d.relayStream(c, resp, req, newMeasure(d.cfg.now))
}

// TestRelayBatchesPerRead: the events of one upstream read reach the
// client in one write and one flush, not one each, and the bytes relayed
// are the same.
func TestRelayBatchesPerRead(t *testing.T) {
	ev := streamText(128)
	w, f := relayFrom(t, newBatchReader(ev, 8), &request{kind: completions, stream: true})
	if f != nil {
		t.Fatal(f.err.Message)
	}
	want := strings.Join(ev[:128], "") + "data: [DONE]\n\n" // the usage chunk is dropped: not asked for
	if string(w.got) != want || w.flushed != len(w.got) {
		t.Fatalf("relayed %d bytes (%d flushed), want %d", len(w.got), w.flushed, len(want))
	}
	// 130 events in reads of 8: 17 reads.
	if w.flushs > 17 || w.writes > 17 {
		t.Fatalf("%d writes and %d flushes for 17 upstream reads", w.writes, w.flushs)
	}
}

// stepReader hands out one event per Read and checks, before each read
// after the first, that everything read so far has been flushed to the
// client: no event waits behind a read of the engine.
type stepReader struct {
	t    *testing.T
	ev   []string
	w    *countingWriter
	sent int
}

func (s *stepReader) Read(p []byte) (int, error) {
	if s.sent > 0 && s.w.flushed != len(s.w.got) {
		s.t.Errorf("read %d: %d bytes written but not flushed while the door waits for the engine", s.sent, len(s.w.got)-s.w.flushed)
	}
	if len(s.ev) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.ev[0])
	s.ev = s.ev[1:]
	s.sent++
	return n, nil
}

// TestRelayFlushesBeforeWaiting: a token is at the client before the door
// reads the engine again, so batching never delays a token.
func TestRelayFlushesBeforeWaiting(t *testing.T) {
	d, err := New(Deps{Decider: &fakeDecider{}, Fleet: fakeFleet{}, Outcomes: &fakeOutcomes{}})
	if err != nil {
		t.Fatal(err)
	}
	gin.SetMode(gin.ReleaseMode)
	w := &countingWriter{h: http.Header{}, keep: true}
	c, _ := gin.CreateTestContext(w)
	c.Request = httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	ev := append([]string{`data: {"object":"chat.completion.chunk","choices":[{"delta":{"role":"assistant","content":""}}]}` + "\n\n"}, streamText(5)...)
	r := &stepReader{t: t, ev: ev, w: w}
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(r)}
	if f := d.relayStream(c, resp, &request{kind: chat, stream: true, includeUsage: true}, newMeasure(d.cfg.now)); f != nil {
		t.Fatal(f.err.Message)
	}
	if want := strings.Join(ev, ""); string(w.got) != want || w.flushed != len(want) {
		t.Fatalf("relayed\n%s\nwant\n%s", w.got, want)
	}
}

// TestUpstreamConnectionReused: sequential streamed requests to one
// engine reuse one connection, though the engine ends each answer a
// little after its [DONE]: the door reads the answer to its end (an
// answer closed before its end costs the connection, and the next
// request a new TCP connection).
func TestUpstreamConnectionReused(t *testing.T) {
	eng := doortest.New(t, "d1")
	eng.Tokens, eng.Tail = 3, 5*time.Millisecond
	var dials atomic.Int64
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	r := newRig(t, []Decision{local(eng)}, nil, WithDialer(dial))
	for range 20 {
		resp, body := r.post("/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":3,"stream":true}`)
		if resp.StatusCode != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("20 sequential requests opened %d connections to the engine", n)
	}
}

// TestDrainBounded: an engine that holds its answer open after [DONE]
// keeps the door's request at most maxDrainWait; the client has its
// [DONE] at once.
func TestDrainBounded(t *testing.T) {
	eng := doortest.New(t, "d1")
	eng.Tokens, eng.Tail = 1, time.Minute
	r := newRig(t, []Decision{local(eng)}, nil)
	start := time.Now()
	resp, body := r.post("/v1/completions", `{"model":"m","prompt":[1],"max_tokens":1,"stream":true}`)
	if resp.StatusCode != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if d := time.Since(start); d < maxDrainWait || d > maxDrainWait+20*time.Second {
		t.Fatalf("the answer ended after %s; the drain waits %s", d, maxDrainWait)
	}
	if o := r.waitOutcomes(1); o[0].Kind != Completed {
		t.Fatalf("outcome %+v", o[0])
	}
}
