package door

import (
	"context"
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

// engine is a minimal OpenAI server speaking the door's contract with the
// engines (docs: door-contract): /tokenize, /v1/completions and
// /v1/chat/completions, streamed or not, and the prefill leg's
// kv_transfer_params. Its misbehaviours are switches, for the hostile
// upstream tests.
type engine struct {
	t   *testing.T
	srv *httptest.Server
	id  string

	mu       sync.Mutex
	bodies   []map[string]any
	headers  []http.Header
	tokenize int

	tokens  int           // tokens per answer
	gap     time.Duration // between tokens
	status  int           // answer this status instead (0: 200)
	hang    time.Duration // before the headers
	slowEv  time.Duration // after the headers, before the first event
	hugeLn  int           // send a line of this many bytes first
	garbage bool          // send a malformed chunk first
	noDone  bool          // end the stream without [DONE]
	// cancelled is closed when a request's context ends before the
	// stream does (the door cancelled it).
	cancelled chan struct{}
}

func newEngine(t *testing.T, id string) *engine {
	e := &engine{t: t, id: id, tokens: 4, cancelled: make(chan struct{}, 16)}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *engine) url() string { return e.srv.URL }

func (e *engine) requests() []map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]map[string]any(nil), e.bodies...)
}

func (e *engine) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	if r.URL.Path == "/tokenize" {
		e.mu.Lock()
		e.tokenize++
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
	if e.hang > 0 {
		select {
		case <-time.After(e.hang):
		case <-r.Context().Done():
			e.cancelled <- struct{}{}
			return
		}
	}
	if e.status != 0 {
		w.WriteHeader(e.status)
		_, _ = io.WriteString(w, `{"object":"error","message":"engine down","type":"InternalServerError","param":null,"code":500}`)
		return
	}
	chat := r.URL.Path == "/v1/chat/completions"
	kv, _ := body["kv_transfer_params"].(map[string]any)
	if body["stream"] != true {
		text := strings.Repeat("x", e.tokens)
		var out map[string]any
		if chat {
			out = map[string]any{"id": "c", "object": "chat.completion", "choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}}}}
		} else {
			out = map[string]any{"id": "c", "object": "text_completion", "choices": []any{map[string]any{"index": 0, "text": text}}}
		}
		n := e.tokens
		out["kv_transfer_params"] = nil
		if kv != nil && kv["do_remote_decode"] == true {
			n = 1
			out["kv_transfer_params"] = map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": []int{1, 2},
				"remote_engine_id": e.id, "remote_request_id": r.Header.Get("X-Request-Id"), "remote_host": "127.0.0.1", "remote_port": 5600, "tp_size": 1}
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
			e.cancelled <- struct{}{}
			return false
		}
	}
	if e.slowEv > 0 && !wait(e.slowEv) {
		return
	}
	if e.hugeLn > 0 {
		send("data: " + strings.Repeat("a", e.hugeLn) + "\n\n")
	}
	if e.garbage {
		send("data: {\"choices\": 7}\n\n")
	}
	if chat {
		send(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
	}
	for i := 0; i < e.tokens; i++ {
		if i > 0 && !wait(e.gap) {
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
		send(fmt.Sprintf(`data: {"id":"c","object":"text_completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", e.tokens, e.tokens+3))
	}
	if !e.noDone {
		send("data: [DONE]\n\n")
	}
}

// fakeDecider answers decisions from a list, in turn, and records the
// requests.
type fakeDecider struct {
	mu    sync.Mutex
	plan  []Decision
	got   []DecideRequest
	calls int
}

func (f *fakeDecider) Decide(_ context.Context, r DecideRequest) (Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, r)
	d := f.plan[min(f.calls, len(f.plan)-1)]
	f.calls++
	d.RequestID = r.RequestID
	d.DecisionID = fmt.Sprintf("dec-%d", f.calls)
	return d, nil
}

type fakeFleet struct{ urls []string }

func (f fakeFleet) Tokenizers(string) []string { return f.urls }
func (f fakeFleet) Models() []string           { return []string{"m"} }

type fakeOutcomes struct {
	mu  sync.Mutex
	got []Outcome
}

func (f *fakeOutcomes) AppendOutcome(_ context.Context, o Outcome) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, o)
	return nil
}

func (f *fakeOutcomes) list() []Outcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Outcome(nil), f.got...)
}
