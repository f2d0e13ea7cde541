package door

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
)

// streamText is an engine's event stream of n token chunks, the usage
// chunk and [DONE], as vLLM writes a completion.
func streamText(n int) []string {
	ev := make([]string, 0, n+2)
	for range n {
		ev = append(ev, `data: {"id":"cmpl-8f1c2a","object":"text_completion","created":1717000000,"model":"bench","choices":[{"index":0,"text":" word","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}`+"\n\n")
	}
	ev = append(ev, `data: {"id":"cmpl-8f1c2a","object":"text_completion","created":1717000000,"model":"bench","choices":[],"usage":{"prompt_tokens":1024,"total_tokens":1152,"completion_tokens":128}}`+"\n\n", "data: [DONE]\n\n")
	return ev
}

// batchReader hands out per events at each Read, as an engine's socket
// does when per events were written to it between two reads of the door.
// Its batches are joined once, so that reading allocates nothing.
type batchReader struct {
	batches [][]byte
	next    int
	buf     []byte
}

func newBatchReader(ev []string, per int) *batchReader {
	b := &batchReader{}
	for i := 0; i < len(ev); i += per {
		b.batches = append(b.batches, []byte(strings.Join(ev[i:min(i+per, len(ev))], "")))
	}
	return b
}

// rewind starts the stream again.
func (b *batchReader) rewind() { b.next, b.buf = 0, nil }

func (b *batchReader) Read(p []byte) (int, error) {
	if len(b.buf) == 0 {
		if b.next == len(b.batches) {
			return 0, io.EOF
		}
		b.buf = b.batches[b.next]
		b.next++
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

// countingWriter is the client's side of the door's response: it counts
// the writes and flushes reaching it (each flush is a write to the
// client's socket).
type countingWriter struct {
	h              http.Header
	writes, flushs int
	// got is what was written, flushed the part of it flushed; keep says
	// whether to hold it (a benchmark does not).
	got     []byte
	flushed int
	keep    bool
}

func (w *countingWriter) Header() http.Header { return w.h }
func (w *countingWriter) WriteHeader(int)     {}
func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	if w.keep {
		w.got = append(w.got, p...)
	}
	return len(p), nil
}
func (w *countingWriter) Flush() { w.flushs++; w.flushed = len(w.got) }

// BenchmarkRelayStream: the door's relay of one 128-token stream (parse,
// measure, write), the engine's events arriving one per read or in
// batches of 8; flushes/op is the door's writes to the client's socket.
func BenchmarkRelayStream(b *testing.B) {
	d, err := New(Deps{Decider: &fakeDecider{}, Fleet: fakeFleet{}, Outcomes: &fakeOutcomes{}})
	if err != nil {
		b.Fatal(err)
	}
	gin.SetMode(gin.ReleaseMode)
	req := &request{kind: completions, stream: true}
	for _, per := range []int{1, 8} {
		b.Run(map[int]string{1: "one-per-read", 8: "eight-per-read"}[per], func(b *testing.B) {
			br := newBatchReader(streamText(128), per)
			w := &countingWriter{h: http.Header{}}
			b.ReportAllocs()
			flushes := 0
			for b.Loop() {
				w.flushs = 0
				br.rewind()
				c, _ := gin.CreateTestContext(w)
				c.Request = httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
				resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
					Body: io.NopCloser(br)}
				if f := d.relayStream(c, resp, req, newMeasure(d.cfg.now)); f != nil {
					b.Fatal(f.err.Message)
				}
				flushes += w.flushs
			}
			b.ReportMetric(float64(flushes)/float64(b.N), "flushes/op")
		})
	}
}

// BenchmarkDecodeBody: rendering the body the decode worker gets (the
// local path: the client's request, asking for the usage chunk), and the
// remote path's, with the prefill's kv_transfer_params.
func BenchmarkDecodeBody(b *testing.B) {
	lim := limits{maxMessages: 4096, maxPromptTokens: 1 << 21}
	kv := []byte(`{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3,4,5,6,7,8],"remote_engine_id":"e1","remote_host":"10.0.0.1","remote_port":5600,"tp_size":1}`)
	for _, c := range []struct {
		name string
		k    kind
		body []byte
		kv   []byte
	}{
		{"ids2000-local", completions, idsBody(2000), nil},
		{"ids2000-remote", completions, idsBody(2000), kv},
		{"chat-local", chat, []byte(`{"model":"bench","max_tokens":64,"stream":true,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"` + strings.Repeat("word ", 400) + `"}]}`), nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			r, perr := parseRequest(c.k, c.body, lim)
			if perr != nil {
				b.Fatal(perr.Error)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			var out []byte // reused, as the door's pooled buffers are
			for b.Loop() {
				var err error
				out, err = decodeBody(out[:0], r, c.kv)
				if err != nil || !bytes.HasSuffix(out, []byte("}")) {
					b.Fatal(err)
				}
			}
		})
	}
}
