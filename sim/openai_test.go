package sim

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

var testLimits = parseLimits{vocab: llama8BVocab, maxModelLen: 4096, model: llama8BModelName}

// TestParseGenRequest covers the fields a proxy rewrites for the two legs
// (toy_proxy_server.py): min_tokens null, max_completion_tokens, stream options, and
// kv_transfer_params read leniently.
func TestParseGenRequest(t *testing.T) {
	g, err := parseGenRequest([]byte(`{"model":"`+llama8BModelName+`","prompt":[1,2,3],"max_tokens":4,"min_tokens":null,
		"stream":true,"stream_options":{"include_usage":true},"temperature":0.7,
		"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"p","remote_request_id":"r","remote_block_ids":[1,2],"remote_host":"h","remote_port":5,"tp_size":1}}`), false, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.prompt) != 3 || g.maxTokens != 4 || !g.stream || !g.includeUsage || g.kv == nil || *g.kv.RemoteEngineID != "p" || *g.kv.RemotePort != 5 {
		t.Fatalf("%+v %+v", g, g.kv)
	}
	g, err = parseGenRequest([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url"}]}],"max_tokens":9,"max_completion_tokens":2,"stream_options":{"include_usage":true}}`), true, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	if g.maxTokens != 2 || g.includeUsage || g.kv != nil || len(g.prompt) == 0 {
		t.Fatalf("chat: %+v (max_completion_tokens wins; usage only when streaming)", g)
	}
	g, err = parseGenRequest([]byte(`{"prompt":[[5,6]],"kv_transfer_params":{"do_remote_decode":false,"do_remote_prefill":false}}`), false, testLimits)
	if err != nil || len(g.prompt) != 2 || g.maxTokens != DefaultMaxTokens || g.kv != nil {
		t.Fatalf("batch of one, inert params: %+v %v", g, err)
	}
}

// FuzzParseGenRequest: any body is parsed or refused with a 4xx and a reason, never
// a panic, and what is accepted is within the engine's bounds.
func FuzzParseGenRequest(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"hello","max_tokens":3}`, `{"prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":2}`, `{"prompt":[[1]],"n":1}`,
		`{"prompt":"x","kv_transfer_params":{"do_remote_decode":true}}`, `{"prompt":["a","b"]}`, `{"prompt":1e99}`, `{`, `null`,
		`{"messages":[{"role":"u","content":[{"type":"text","text":"t"}]}],"min_completion_tokens":1}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		g, err := parseGenRequest(body, chat, testLimits)
		if err != nil {
			if err.status < 400 || err.status > 499 || err.code == "" || !utf8.ValidString(err.code) {
				t.Fatalf("refusal %+v", err)
			}
			if _, jerr := json.Marshal(map[string]any{"message": err.msg}); jerr != nil {
				t.Fatal(jerr)
			}
			return
		}
		if len(g.prompt) == 0 || g.maxTokens < 1 || len(g.prompt)+g.maxTokens > testLimits.maxModelLen {
			t.Fatalf("accepted out of bounds: %d prompt tokens, max_tokens %d", len(g.prompt), g.maxTokens)
		}
		for _, v := range g.prompt {
			if v >= llama8BVocab {
				t.Fatalf("token %d outside the vocabulary", v)
			}
		}
		if g.kv != nil && !g.kv.DoRemoteDecode && !g.kv.DoRemotePrefill {
			t.Fatal("inert kv_transfer_params kept")
		}
	})
}

// FuzzParseTokenizeRequest: /tokenize bodies are parsed or refused, never a panic.
func FuzzParseTokenizeRequest(f *testing.F) {
	for _, s := range []string{`{"prompt":"hello"}`, `{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}`, `{"prompt":[1]}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		toks, err := parseTokenizeRequest(body, testLimits)
		if err != nil {
			if err.status < 400 || err.status > 499 || err.code == "" {
				t.Fatalf("refusal %+v", err)
			}
			return
		}
		if len(toks) > len(body) {
			t.Fatalf("%d tokens from a %d-byte body", len(toks), len(body))
		}
	})
}
