// Package doortest is a minimal OpenAI engine speaking the door's contract
// with the engines (/tokenize, /v1/completions and /v1/chat/completions,
// streamed or not, and the NixlConnector prefill leg's kv_transfer_params),
// with switches for misbehaviour. Tests of the door and the door benchmark
// use it where the simulated engines are not needed.
package doortest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Engine is an OpenAI server on a real socket. Set its switches before
// the first request.
type Engine struct {
	srv *httptest.Server
	ID  string

	mu        sync.Mutex
	bodies    []map[string]any
	headers   []http.Header
	tokenizes int

	Tokens  int           // tokens per answer
	Gap     time.Duration // between tokens
	Status  int           // answer this status instead (0: 200)
	Hang    time.Duration // before the headers
	SlowEv  time.Duration // after the headers, before the first event
	HugeLn  int           // send a line of this many bytes first
	Garbage bool          // send a malformed chunk first
	NoDone  bool          // end the stream without [DONE]
	Tail    time.Duration // after [DONE], before the answer ends
	// ErrorBody is the body of a Status answer (empty: vLLM's error of an
	// engine that is down).
	ErrorBody string
	// Cancelled gets one value when a request's context ends before the
	// stream does (the door cancelled it).
	Cancelled chan struct{}
}

// Start serves an engine named id, answering 4 tokens per request.
func Start(id string) *Engine {
	e := &Engine{ID: id, Tokens: 4, Cancelled: make(chan struct{}, 16)}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	return e
}

// New starts an engine closed when t ends.
func New(t testing.TB, id string) *Engine {
	e := Start(id)
	t.Cleanup(e.Close)
	return e
}

// Close stops the engine.
func (e *Engine) Close() { e.srv.Close() }

// URL is the engine's base URL (its http_url).
func (e *Engine) URL() string { return e.srv.URL }

// Requests are the bodies of the completion requests received.
func (e *Engine) Requests() []map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]map[string]any(nil), e.bodies...)
}

// Headers are the headers of the completion requests received.
func (e *Engine) Headers() []http.Header {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]http.Header(nil), e.headers...)
}

// Tokenizes counts /tokenize calls.
func (e *Engine) Tokenizes() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tokenizes
}

func (e *Engine) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	if r.URL.Path == "/tokenize" {
		e.mu.Lock()
		e.tokenizes++
		e.mu.Unlock()
		text, ok := body["prompt"].(string)
		if !ok {
			m, _ := json.Marshal(body["messages"])
			text = string(m)
		}
		ids := make([]int, len(text))
		for i := range text {
			ids[i] = int(text[i])
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"count": len(ids), "max_model_len": 1 << 20, "tokens": ids})
		return
	}
	e.mu.Lock()
	e.bodies = append(e.bodies, body)
	e.headers = append(e.headers, r.Header.Clone())
	e.mu.Unlock()
	if e.Hang > 0 {
		select {
		case <-time.After(e.Hang):
		case <-r.Context().Done():
			e.Cancelled <- struct{}{}
			return
		}
	}
	if e.Status != 0 {
		w.WriteHeader(e.Status)
		body := e.ErrorBody
		if body == "" {
			body = `{"object":"error","message":"engine down","type":"InternalServerError","param":null,"code":500}`
		}
		_, _ = io.WriteString(w, body)
		return
	}
	chat := r.URL.Path == "/v1/chat/completions"
	kv, _ := body["kv_transfer_params"].(map[string]any)
	if body["stream"] != true {
		text := strings.Repeat("x", e.Tokens)
		var out map[string]any
		if chat {
			out = map[string]any{"id": "c", "object": "chat.completion", "choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}}}}
		} else {
			out = map[string]any{"id": "c", "object": "text_completion", "choices": []any{map[string]any{"index": 0, "text": text}}}
		}
		n := e.Tokens
		out["kv_transfer_params"] = nil
		if kv != nil && kv["do_remote_decode"] == true {
			n = 1
			out["kv_transfer_params"] = map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": []int{1, 2},
				"remote_engine_id": e.ID, "remote_request_id": r.Header.Get("X-Request-Id"), "remote_host": "127.0.0.1", "remote_port": 5600, "tp_size": 1}
		}
		out["usage"] = map[string]any{"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fl.Flush()
	send := func(s string) bool {
		if _, err := io.WriteString(w, s); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	wait := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-r.Context().Done():
			e.Cancelled <- struct{}{}
			return false
		}
	}
	if e.SlowEv > 0 && !wait(e.SlowEv) {
		return
	}
	if e.HugeLn > 0 {
		send("data: " + strings.Repeat("a", e.HugeLn) + "\n\n")
	}
	if e.Garbage {
		send("data: {\"choices\": 7}\n\n")
	}
	if chat {
		send(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
	}
	for i := 0; i < e.Tokens; i++ {
		if i > 0 && !wait(e.Gap) {
			return
		}
		var c string
		if chat {
			c = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"}}]}`
		} else {
			c = `{"id":"c","object":"text_completion","choices":[{"index":0,"text":"x"}]}`
		}
		if !send("data: " + c + "\n\n") {
			return
		}
	}
	if so, _ := body["stream_options"].(map[string]any); so["include_usage"] == true {
		send(fmt.Sprintf(`data: {"id":"c","object":"text_completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", e.Tokens, e.Tokens+3))
	}
	if !e.NoDone {
		send("data: [DONE]\n\n")
	}
	if e.Tail > 0 {
		select { // a door that leaves early is not a cancellation
		case <-time.After(e.Tail):
		case <-r.Context().Done():
		}
	}
}
