package door

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestParseRequest: the OpenAI bodies the door takes and refuses, with
// the code, param and rejects reason of each refusal.
func TestParseRequest(t *testing.T) {
	lim := limits{maxMessages: 3, maxPromptTokens: 4}
	for _, c := range []struct {
		name, body string
		k          kind
		code       string // "" accepted
		param      string
		reason     string
		check      func(t *testing.T, r *request)
	}{
		{name: "text prompt", body: `{"model":"m","prompt":"hi","max_tokens":7,"stream":true,"stream_options":{"include_usage":true}}`,
			check: func(t *testing.T, r *request) {
				if string(r.prompt) != `"hi"` || r.maxTokens != 7 || !r.stream || !r.includeUsage || r.tokenIDs != nil {
					t.Fatalf("%+v", r)
				}
			}},
		{name: "token ids", body: `{"model":"m","prompt":[0,4294967295]}`,
			check: func(t *testing.T, r *request) {
				if len(r.tokenIDs) != 2 || r.tokenIDs[1] != 4294967295 || r.maxTokens != 0 {
					t.Fatalf("%+v", r)
				}
			}},
		{name: "the smaller of max_tokens and max_completion_tokens", body: `{"model":"m","prompt":"x","max_tokens":9,"max_completion_tokens":5}`,
			check: func(t *testing.T, r *request) {
				if r.maxTokens != 5 {
					t.Fatal(r.maxTokens)
				}
			}},
		{name: "nulls are absent", body: `{"model":"m","prompt":"x","max_tokens":null,"stream":null,"stream_options":null}`},
		{name: "chat", k: chat, body: `{"model":"m","messages":[{"role":"user","content":"a"}]}`,
			check: func(t *testing.T, r *request) {
				if !strings.HasPrefix(string(r.prompt), "[") {
					t.Fatal(string(r.prompt))
				}
			}},
		{name: "client kv_transfer_params", body: `{"model":"m","prompt":"x","kv_transfer_params":{"remote_host":"h","remote_port":1}}`, code: "router_owned_field", param: "kv_transfer_params", reason: reasonRouterOwned},
		{name: "client kv_transfer_params not an object", k: chat, body: `{"model":"m","messages":[{}],"kv_transfer_params":"x"}`, code: "router_owned_field", param: "kv_transfer_params", reason: reasonRouterOwned},
		{name: "not an object", body: `[1]`, code: "invalid_json", reason: reasonInvalidJSON},
		{name: "null body", body: `null`, code: "invalid_json", reason: reasonInvalidJSON},
		{name: "no model", body: `{"prompt":"x"}`, code: "invalid_value", param: "model", reason: reasonInvalidRequest},
		{name: "model not a string", body: `{"model":1,"prompt":"x"}`, code: "invalid_type", param: "model", reason: reasonInvalidRequest},
		{name: "stream not a bool", body: `{"model":"m","prompt":"x","stream":"yes"}`, code: "invalid_type", param: "stream", reason: reasonInvalidRequest},
		{name: "max_tokens 0", body: `{"model":"m","prompt":"x","max_tokens":0}`, code: "invalid_value", param: "max_tokens", reason: reasonInvalidRequest},
		{name: "max_tokens fraction", body: `{"model":"m","prompt":"x","max_tokens":1.5}`, code: "invalid_value", param: "max_tokens", reason: reasonInvalidRequest},
		{name: "max_tokens huge", body: `{"model":"m","prompt":"x","max_tokens":1e300}`, code: "invalid_value", param: "max_tokens", reason: reasonInvalidRequest},
		{name: "no prompt", body: `{"model":"m"}`, code: "missing_field", param: "prompt", reason: reasonInvalidRequest},
		{name: "empty prompt", body: `{"model":"m","prompt":""}`, code: "invalid_value", param: "prompt", reason: reasonInvalidRequest},
		{name: "empty ids", body: `{"model":"m","prompt":[]}`, code: "invalid_value", param: "prompt", reason: reasonInvalidRequest},
		{name: "batched strings", body: `{"model":"m","prompt":["a","b"]}`, code: "invalid_type", param: "prompt", reason: reasonInvalidRequest},
		{name: "batched ids", body: `{"model":"m","prompt":[[1],[2]]}`, code: "invalid_type", param: "prompt", reason: reasonInvalidRequest},
		{name: "negative id", body: `{"model":"m","prompt":[-1]}`, code: "invalid_value", param: "prompt[0]", reason: reasonInvalidRequest},
		{name: "id over 32 bits", body: `{"model":"m","prompt":[1,4294967296]}`, code: "invalid_value", param: "prompt[1]", reason: reasonInvalidRequest},
		{name: "fractional id", body: `{"model":"m","prompt":[1.5]}`, code: "invalid_value", param: "prompt[0]", reason: reasonInvalidRequest},
		{name: "too many ids", body: `{"model":"m","prompt":[1,2,3,4,5]}`, code: "too_many_tokens", param: "prompt", reason: reasonTooManyTokens},
		{name: "prompt a number", body: `{"model":"m","prompt":5}`, code: "invalid_type", param: "prompt", reason: reasonInvalidRequest},
		{name: "no messages", k: chat, body: `{"model":"m"}`, code: "missing_field", param: "messages", reason: reasonInvalidRequest},
		{name: "messages not an array", k: chat, body: `{"model":"m","messages":{}}`, code: "invalid_type", param: "messages", reason: reasonInvalidRequest},
		{name: "no message", k: chat, body: `{"model":"m","messages":[]}`, code: "invalid_value", param: "messages", reason: reasonInvalidRequest},
		{name: "message not an object", k: chat, body: `{"model":"m","messages":[{},"x"]}`, code: "invalid_type", param: "messages[1]", reason: reasonInvalidRequest},
		{name: "too many messages", k: chat, body: `{"model":"m","messages":[{},{},{},{}]}`, code: "too_many_messages", param: "messages", reason: reasonTooManyMsgs},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := parseRequest(c.k, []byte(c.body), lim)
			if c.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err.Error)
				}
				if c.check != nil {
					c.check(t, r)
				}
				return
			}
			if err == nil || err.Code != c.code || err.Param != c.param || err.reason != c.reason || err.Status != 400 {
				t.Fatalf("got %+v, want %s on %q (%s)", err, c.code, c.param, c.reason)
			}
		})
	}
}

// TestPrefillAndDecodeBodies: the legs change only what the exchange
// needs, and keep every other field of the client's body.
func TestPrefillAndDecodeBodies(t *testing.T) {
	r, perr := parseRequest(completions, []byte(`{"model":"m","prompt":"x","stream":true,"stream_options":{"continuous_usage_stats":true},"min_tokens":3,"top_k":5}`), limits{maxMessages: 1, maxPromptTokens: 1})
	if perr != nil {
		t.Fatal(perr)
	}
	p, _ := prefillBody(nil, r)
	if want := `{"model":"m","prompt":"x","stream":false,"top_k":5,"max_tokens":1,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}}`; string(p) != want {
		t.Fatalf("prefill\n got %s\nwant %s", p, want)
	}
	d, _ := decodeBody(nil, r, []byte(`{"do_remote_prefill":true}`))
	if want := `{"model":"m","prompt":"x","stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":true},"min_tokens":3,"top_k":5,"kv_transfer_params":{"do_remote_prefill":true}}`; string(d) != want {
		t.Fatalf("decode\n got %s\nwant %s", d, want)
	}
	for _, c := range []struct {
		body string
		ok   bool
		kv   string
	}{
		{`{"kv_transfer_params":{"remote_block_ids":[1]}}`, true, `{"remote_block_ids":[1]}`},
		{`{"kv_transfer_params":null}`, true, ""},
		{`{}`, true, ""},
		{`{"kv_transfer_params":[1]}`, false, ""},
		{`garbage`, false, ""},
	} {
		kv, ok := prefillAnswer([]byte(c.body))
		if ok != c.ok || string(kv) != c.kv {
			t.Errorf("%s: got %s %v", c.body, kv, ok)
		}
	}
}

// TestDecodeBodySplice: the decode leg is the client's bytes with only
// what the door adds spliced in; the very same bytes when it adds
// nothing; and a body whose door fields are given twice or spelled with
// an escape is rendered as encoding/json reads it, so the engine gets the
// fields the door decided on.
func TestDecodeBodySplice(t *testing.T) {
	lim := limits{maxMessages: 4, maxPromptTokens: 8}
	for _, c := range []struct{ body, want string }{
		{`{"model":"m", "prompt" : [1,2], "temperature":0.5}`, `{"model":"m", "prompt" : [1,2], "temperature":0.5}`},
		{`{"model":"m","prompt":[1],"stream":true,"stream_options":{"include_usage":true}}`, `{"model":"m","prompt":[1],"stream":true,"stream_options":{"include_usage":true}}`},
		{`{"model":"m","prompt":[1],"stream":true}`, `{"model":"m","prompt":[1],"stream":true,"stream_options":{"include_usage":true}}`},
		{`{"model":"m","prompt":[1],"stream":true,"stream_options":{ }}`, `{"model":"m","prompt":[1],"stream":true,"stream_options":{"include_usage":true}}`},
		{`{"model":"m","prompt":[1],"stream":true,"stream_options":{"include_usage":false}}`, `{"model":"m","prompt":[1],"stream":true,"stream_options":{"include_usage":true}}`},
		{`{"kv_transfer_params":null,"model":"m","prompt":"x"}`, `{"model":"m","prompt":"x"}`},
		{`{"model":"m","kv_transfer_params":null,"prompt":"x"}`, `{"model":"m","prompt":"x"}`},
		// Given twice, or escaped: through encoding/json (sorted keys, the
		// last of duplicates).
		{`{"model":"m","prompt":"x","stream":false,"stream":true}`, `{"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true}}`},
		{`{"model":"m","prompt":"x","str\u0065am":true}`, `{"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true}}`},
		{`{"model":"m","prompt":"x","kv_transfer_params":{"remote_host":"evil"},"kv_transfer_params":null}`, `{"model":"m","prompt":"x"}`},
	} {
		r, perr := parseRequest(completions, []byte(c.body), lim)
		if perr != nil {
			t.Fatalf("%s: %v", c.body, perr.Error)
		}
		got, err := decodeBody(nil, r, nil)
		if err != nil || string(got) != c.want {
			t.Errorf("%s\n got %s\nwant %s (%v)", c.body, got, c.want, err)
		}
		// Even unchanged, the engine's body is its own copy: the client's
		// buffer goes back to the pool when the request ends, and a
		// transport may still hold the engine's body then (bodybuf.go).
		if &got[0] == &r.fields.raw[0] {
			t.Errorf("%s: the engine's body shares the client's buffer", c.body)
		}
	}
}

// TestSSEReader: events are split on blank lines, multi-line data joined,
// comments and other fields skipped, CRLF accepted; a line over the bound
// is refused, whether it arrives in one read or many.
func TestSSEReader(t *testing.T) {
	in := ": comment\r\nevent: x\r\ndata: {\"a\":1}\r\n\r\ndata:b\ndata: c\n\nid: 5\n\ndata: last"
	s := newSSEReader(strings.NewReader(in), 64)
	var got []string
	for {
		d, err := s.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(d))
	}
	if strings.Join(got, "|") != `{"a":1}|b`+"\n"+`c|last` {
		t.Fatalf("%q", got)
	}
	for _, n := range []int{100, 64 << 10} {
		s := newSSEReader(io.MultiReader(strings.NewReader("data: "), bytes.NewReader(bytes.Repeat([]byte("a"), n))), 64)
		if _, err := s.next(); !errors.Is(err, errLineTooLong) {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
	s = newSSEReader(strings.NewReader(strings.Repeat("data: aaaaaaaaaaaa\n", 10)+"\n"), 64)
	if _, err := s.next(); !errors.Is(err, errLineTooLong) {
		t.Fatalf("an event's joined data is bounded too: %v", err)
	}
}

// TestParseChunk: OpenAI chunks, the usage chunk, [DONE] and both error
// shapes are read; anything else is refused.
func TestParseChunk(t *testing.T) {
	for _, c := range []struct {
		in    string
		token bool
		usage bool
		done  bool
		err   bool // an error event
		bad   bool // refused
	}{
		{in: `{"choices":[{"text":"x"}]}`, token: true},
		{in: `{"choices":[{"delta":{"content":"x"}}]}`, token: true},
		{in: `{"choices":[{"delta":{"role":"assistant","content":""}}]}`},
		{in: `{"choices":[{"delta":{"tool_calls":[{}]}}]}`, token: true},
		{in: `{"choices":[],"usage":{"completion_tokens":3}}`, usage: true},
		{in: `[DONE]`, done: true},
		{in: `{"error":{"message":"boom"}}`, err: true},
		{in: `{"object":"error","message":"boom"}`, err: true},
		{in: `{}`, bad: true},
		{in: `{"choices":7}`, bad: true},
		{in: `{"choices":[],"usage":{"completion_tokens":-1}}`, bad: true},
		{in: `nope`, bad: true},
		{in: ``, bad: true},
		{in: `{"choices":[`, bad: true},
	} {
		ch, err := parseChunk([]byte(c.in))
		if (err != nil) != c.bad || ch.token != c.token || ch.usageOnly != c.usage || ch.done != c.done || (ch.err != nil) != c.err {
			t.Errorf("%s: got %+v %v", c.in, ch, err)
		}
	}
}
