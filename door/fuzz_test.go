package door

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
)

// FuzzSSEStream: whatever an engine sends, the reader and chunk parser end
// with an event, io.EOF or a precise error; no event's data is over the
// line bound, and nothing panics.
func FuzzSSEStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(": c\r\ndata: {\"object\":\"error\",\"message\":\"m\"}\r\n\r\n"))
	f.Add([]byte("data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\ndata:\ndata:\n\n"))
	f.Add(bytes.Repeat([]byte("a"), 300))
	f.Fuzz(func(t *testing.T, in []byte) {
		s := newSSEReader(bytes.NewReader(in), 128)
		for i := 0; ; i++ {
			d, err := s.next()
			if err == io.EOF || errors.Is(err, errLineTooLong) {
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if len(d) > 128 {
				t.Fatalf("event data of %d bytes over the bound", len(d))
			}
			if _, err := parseChunk(d); err != nil && err.Error() == "" {
				t.Fatal("an error without a message")
			}
			if i > len(in)+1 {
				t.Fatal("more events than input bytes")
			}
		}
	})
}

// FuzzParseRequest: any body is taken or refused with an OpenAI error and
// a rejects reason, the door's fields read as encoding/json reads them; a
// taken body is rendered into both legs as encoding/json would render
// them (referenceLegs), whether spliced or not.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt":[1,2,3],"stream":true}`), false)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":3}`), true)
	f.Add([]byte(`{"model":"m","prompt":"x","stream_options":{"include_usage":true}}`), false)
	f.Add([]byte(`{"model":"m","prompt":"x","kv_transfer_params":null}`), false)
	f.Add([]byte(`{"model":"m","prompt":"x","stream":true,"stream_options":{"a":1,"include_usage":false},"min_tokens":2,"max_completion_tokens":null}`), false)
	f.Add([]byte(`{"model":"m","prompt":"x","str\u0065am":true,"model":"n","kv_transfer_params":{"a":1},"kv_transfer_params":null}`), false)
	f.Fuzz(func(t *testing.T, body []byte, isChat bool) {
		k := completions
		if isChat {
			k = chat
		}
		var m map[string]json.RawMessage
		mapErr := json.Unmarshal(body, &m)
		fs, ok := scanBody(body)
		if ok != (mapErr == nil && m != nil) {
			t.Fatalf("%s: scanned %v, encoding/json %v", body, ok, mapErr)
		}
		for i, name := range fieldNames {
			if v, in := m[name]; ok && (in != fs.has(i) || !bytes.Equal(v, fs.val[i])) {
				t.Fatalf("%s: %s scanned %q, encoding/json %q", body, name, fs.val[i], v)
			}
		}
		r, perr := parseRequest(k, body, limits{maxMessages: 8, maxPromptTokens: 16})
		if perr != nil {
			if perr.Status != 400 || perr.Code == "" || perr.reason == "" || perr.Type != typeInvalidRequest {
				t.Fatalf("refusal %+v", perr)
			}
			return
		}
		if len(r.tokenIDs) > 16 || (r.tokenIDs == nil && len(r.prompt) == 0) {
			t.Fatalf("accepted %+v", r)
		}
		kv := []byte(`{"x":1}`)
		wantP, wantD := referenceLegs(t, m, r.stream, kv)
		// The legs are appended to what the buffer holds, which they
		// leave as it is.
		pre := []byte("pre")
		if p, err := prefillBody(pre, r); err != nil || !bytes.HasPrefix(p, pre) || !sameJSON(p[len(pre):], wantP) {
			t.Fatalf("%s: prefill body %s, want pre%s (%v)", body, p, wantP, err)
		}
		if d, err := decodeBody(pre, r, kv); err != nil || !bytes.HasPrefix(d, pre) || !sameJSON(d[len(pre):], wantD) {
			t.Fatalf("%s: decode body %s, want pre%s (%v)", body, d, wantD, err)
		}
		// The local path never carries kv_transfer_params of the client's.
		b, err := decodeBody(nil, r, nil)
		var out map[string]json.RawMessage
		if err != nil || json.Unmarshal(b, &out) != nil {
			t.Fatalf("decode body %s: %v", b, err)
		}
		if _, ok := out[fieldKVTransfer]; ok {
			t.Fatalf("the local body carries kv_transfer_params: %s", b)
		}
	})
}

// FuzzChunkScan: every chunk scanChunk reads, it reads as encoding/json
// does (unmarshalChunk, the reference); what it leaves, unmarshalChunk
// reads or refuses. The seeds are the shapes engines send and the
// spellings encoding/json matches that the scanner must leave to it.
func FuzzChunkScan(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"text_completion","choices":[{"index":0,"text":" w","finish_reason":null}],"usage":null}`,
		`{"object":"chat.completion.chunk","choices":[{"delta":{"role":"assistant","content":""}}]}`,
		`{"choices":[{"delta":{"content":"\u0000"}}]}`,
		`{"choices":[{"delta":{"reasoning_content":"r"}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"id":"t"}]}}]}`,
		`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}}`,
		`{"choices":null,"usage":{"completion_tokens":-1}}`,
		`{"usage":{"completion_tokens":1.5}}`,
		`{"usage":{"completion_tokens":9223372036854775808}}`,
		`{"object":"error","message":"m"}`,
		`{"error":{"message":"x"}}`,
		`{"Choices":[{"Text":"x"}]}`,
		`{"choices":[{"text":"x"}],"choices":[]}`,
		`{"choices":[{"delta":{"content":"a"},"delta":{"role":"x"}}]}`,
		`{"ob\u006aect":"error","message":"m"}`,
		`{"choices":[null,{"text":""},{"text":1}]}`,
		`{"uſage":{}}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := scanChunk(data)
		want, werr := unmarshalChunk(data)
		if !ok {
			if _, err := parseChunk(data); err != nil && err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		if werr != nil || want.err != nil {
			t.Fatalf("%s: the scanner read %+v, encoding/json refuses (%v) or reads an error (%v)", data, got, werr, want.err)
		}
		if got != want {
			t.Fatalf("%s: the scanner read %+v, encoding/json %+v", data, got, want)
		}
	})
}

// TestChunkScanTakesEngineShapes: the chunks engines send are read by the
// scanner, not left to encoding/json (which would cost what it saves).
func TestChunkScanTakesEngineShapes(t *testing.T) {
	for _, s := range []string{
		`{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" w","logprobs":null,"finish_reason":null}],"usage":null}`,
		`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" w"},"finish_reason":"length"}]}`,
		`{"id":"c","object":"text_completion","choices":[],"usage":{"prompt_tokens":3,"total_tokens":10,"completion_tokens":7}}`,
	} {
		if _, ok := scanChunk([]byte(s)); !ok {
			t.Errorf("left to encoding/json: %s", s)
		}
	}
}

// referenceLegs renders both legs of a body read into fields through
// encoding/json: the reference the spliced rendering is held to.
func referenceLegs(t *testing.T, fields map[string]json.RawMessage, stream bool, kv []byte) (prefill, decode []byte) {
	t.Helper()
	render := func(set map[string]any) []byte {
		out := map[string]any{}
		for k, v := range fields {
			out[k] = v
		}
		for k, v := range set {
			if v == nil {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
		b, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	set := map[string]any{"stream": false, "max_tokens": 1, "stream_options": nil, "min_tokens": nil,
		"min_completion_tokens": nil, fieldKVTransfer: json.RawMessage(prefillRequestParams)}
	if _, ok := fields["max_completion_tokens"]; ok {
		set["max_completion_tokens"] = 1
	}
	prefill = render(set)
	set = map[string]any{fieldKVTransfer: json.RawMessage(kv)}
	if stream {
		so := map[string]json.RawMessage{}
		if raw := fields["stream_options"]; raw != nil && string(raw) != "null" {
			_ = json.Unmarshal(raw, &so)
		}
		so["include_usage"] = json.RawMessage("true")
		set["stream_options"] = so
	}
	return prefill, render(set)
}

// sameJSON: a and b read the same through encoding/json (numbers exact).
func sameJSON(a, b []byte) bool {
	read := func(x []byte) (any, bool) {
		d := json.NewDecoder(bytes.NewReader(x))
		d.UseNumber()
		var v any
		return v, d.Decode(&v) == nil && !d.More()
	}
	va, oka := read(a)
	vb, okb := read(b)
	return oka && okb && reflect.DeepEqual(va, vb)
}
