package door

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/door/doortest"
)

// idsBody is a completion request whose prompt is n token ids.
func idsBody(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"bench","max_tokens":64,"stream":true,"temperature":0.7,"prompt":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", 1000+i*7919%150000)
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// BenchmarkParseRequest: the door's parse of a client body.
func BenchmarkParseRequest(b *testing.B) {
	lim := limits{maxMessages: 4096, maxPromptTokens: 1 << 21}
	for _, c := range []struct {
		name string
		k    kind
		body []byte
	}{
		{"ids2000", completions, idsBody(2000)},
		{"chat", chat, []byte(`{"model":"bench","max_tokens":64,"stream":true,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"` + strings.Repeat("word ", 400) + `"}]}`)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if _, err := parseRequest(c.k, c.body, lim); err != nil {
					b.Fatal(err.Error)
				}
			}
		})
	}
}

// BenchmarkParseChunk: the door's read of one streamed chunk, of the
// shapes a stream is made of.
func BenchmarkParseChunk(b *testing.B) {
	for _, c := range []struct{ name, data string }{
		{"completion", `{"id":"cmpl-8f1c2a","object":"text_completion","created":1717000000,"model":"bench","choices":[{"index":0,"text":" word","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}`},
		{"chat", `{"id":"chatcmpl-8f1c2a","object":"chat.completion.chunk","created":1717000000,"model":"bench","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}`},
		{"usage", `{"id":"cmpl-8f1c2a","object":"text_completion","created":1717000000,"model":"bench","choices":[],"usage":{"prompt_tokens":2000,"total_tokens":2064,"completion_tokens":64}}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			data := []byte(c.data)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parseChunk(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLocalStream: one whole streamed request on the local path over
// loopback: client → door → engine (16 tokens) → door → client.
func BenchmarkLocalStream(b *testing.B) {
	eng := doortest.New(b, "d1")
	eng.Tokens = 16
	r := newRig(b, []Decision{local(eng)}, nil)
	body := string(idsBody(2000))
	b.ReportAllocs()
	for b.Loop() {
		resp, err := http.Post(r.srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatal(resp.StatusCode)
		}
	}
}
