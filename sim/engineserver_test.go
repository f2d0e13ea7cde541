package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/ingest"
	"github.com/pdrouter/pdrouter/internal/rejects"
)

// servingFleet is a live fleet run by RunFleet against the stub router, kept serving
// after its workload's report.
type servingFleet struct {
	regs    map[string]WorkerRegistration
	report  *Report
	rejects *rejects.Counter
}

// smallFleet is 1P1D with a 256-block cache (max model length 4096), so that usage
// and events are easy to read.
func smallFleet() FleetConfig {
	fc := DefaultFleet()
	fc.Prefill, fc.Decode, fc.NumBlocks = 1, 1, 256
	return fc
}

// startServingFleet runs fc with workload w (nil: none) until the test ends and
// returns once the workload's report is out.
func startServingFleet(t *testing.T, fc FleetConfig, w *Workload, scale float64, mod func(*RunConfig)) *servingFleet {
	t.Helper()
	stub := &stubRouter{events: map[string][]string{}}
	srv := httptest.NewServer(stub)
	t.Cleanup(srv.Close)
	if w == nil {
		w = &Workload{Name: "none"}
	}
	cfg := RunConfig{RouterURL: srv.URL, Fleet: fc, TimeScale: scale, Progress: -1, KeepServing: true}
	if mod != nil {
		mod(&cfg)
	}
	sf := &servingFleet{regs: map[string]WorkerRegistration{}, rejects: rejects.For(nil)}
	reported := make(chan struct{})
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := RunFleet(ctx, cfg, w, RunDeps{Rejects: sf.rejects,
			OnReady: func(rs []WorkerRegistration) {
				for _, r := range rs {
					sf.regs[r.WorkerID] = r
				}
			},
			OnReport: func(r *Report) { sf.report = r; close(reported) }})
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunFleet: %v", err)
		}
	})
	select {
	case <-reported:
	case err := <-done:
		done <- err
		t.Fatalf("RunFleet ended before its report: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("no report within 60 s")
	}
	return sf
}

func (sf *servingFleet) url(worker, path string) string { return sf.regs[worker].HTTPURL + path }

// post sends a JSON body (a string is sent as is) and returns the status and body.
func post(t *testing.T, url string, body any, hdr map[string]string) (int, []byte) {
	t.Helper()
	var b []byte
	if s, ok := body.(string); ok {
		b = []byte(s)
	} else {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// answer is the union of the non-streamed answers the tests read.
type answer struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Text    string `json:"text"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	KV    *KVTransferParams `json:"kv_transfer_params"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func decodeAnswer(t *testing.T, b []byte) answer {
	t.Helper()
	var a answer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("answer %q: %v", b, err)
	}
	return a
}

// generate posts a non-streamed request that must succeed.
func generate(t *testing.T, url string, body map[string]any, hdr map[string]string) answer {
	t.Helper()
	st, b := post(t, url, body, hdr)
	if st != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, st, b)
	}
	return decodeAnswer(t, b)
}

// stream posts a streamed request and returns its data payloads ([DONE] included).
func stream(t *testing.T, url string, body map[string]any) []string {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %d %s %s", url, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("SSE line %q", line)
		}
		out = append(out, data)
	}
	return out
}

// metricValue reads one series of an engine's /metrics.
func metricValue(t *testing.T, metricsURL, name string) float64 {
	t.Helper()
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, name+"{") {
			v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("%s has no %s", metricsURL, name)
	return 0
}

// eventually polls cond for up to 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20 s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEngineCompletions: a completion answers OpenAI's JSON with exactly max_tokens
// tokens (16 when absent), usage counting the prompt as /tokenize does, a null
// kv_transfer_params, and the same text for the same prompt; the registration names
// the API and /metrics on the same listener; /v1/models and /health answer.
func TestEngineCompletions(t *testing.T) {
	sf := startServingFleet(t, smallFleet(), nil, 20, nil)
	reg := sf.regs["decode-0"]
	if !strings.HasPrefix(reg.HTTPURL, "http://127.0.0.1:") || reg.MetricsURL != reg.HTTPURL+"/metrics" {
		t.Fatalf("registration %+v", reg)
	}
	prompt := "The quick brown fox jumps over the lazy dog."
	url := sf.url("decode-0", "/v1/completions")
	a := generate(t, url, map[string]any{"model": reg.Model, "prompt": prompt, "max_tokens": 5}, nil)
	if a.Object != "text_completion" || a.Model != reg.Model || len(a.Choices) != 1 || a.Usage == nil ||
		a.Choices[0].FinishReason == nil || *a.Choices[0].FinishReason != "length" {
		t.Fatalf("answer %+v", a)
	}
	if n := len(strings.Fields(a.Choices[0].Text)); n != 5 || a.Usage.CompletionTokens != 5 {
		t.Errorf("text %q (%d words), usage %+v", a.Choices[0].Text, n, a.Usage)
	}
	st, tb := post(t, sf.url("decode-0", "/tokenize"), map[string]any{"model": reg.Model, "prompt": prompt}, nil)
	var tok struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(tb, &tok); err != nil || st != 200 {
		t.Fatalf("tokenize: %d %s", st, tb)
	}
	if tok.Count != len(tok.Tokens) || tok.Count != a.Usage.PromptTokens || a.Usage.TotalTokens != tok.Count+5 || tok.MaxModelLen != 4096 {
		t.Errorf("tokenize %+v, usage %+v", tok, a.Usage)
	}
	_, raw := post(t, url, map[string]any{"model": reg.Model, "prompt": prompt, "max_tokens": 5}, nil)
	if !bytes.Contains(raw, []byte(`"kv_transfer_params":null`)) {
		t.Errorf("answer without a null kv_transfer_params: %s", raw)
	}
	if b := decodeAnswer(t, raw); b.Choices[0].Text != a.Choices[0].Text {
		t.Errorf("same prompt, different text: %q vs %q", b.Choices[0].Text, a.Choices[0].Text)
	}
	// The same prompt as token ids is the same request.
	if c := generate(t, url, map[string]any{"prompt": tok.Tokens, "max_tokens": 5}, nil); c.Choices[0].Text != a.Choices[0].Text {
		t.Errorf("token-id prompt: %q vs %q", c.Choices[0].Text, a.Choices[0].Text)
	}
	if d := generate(t, url, map[string]any{"prompt": prompt}, nil); d.Usage.CompletionTokens != DefaultMaxTokens {
		t.Errorf("default max_tokens: %d tokens", d.Usage.CompletionTokens)
	}
	resp, err := http.Get(sf.url("decode-0", "/v1/models"))
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string `json:"id"`
			OwnedBy     string `json:"owned_by"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if models.Object != "list" || len(models.Data) != 1 || models.Data[0].ID != reg.Model || models.Data[0].OwnedBy != "pdrouter-sim" || models.Data[0].MaxModelLen != 4096 {
		t.Errorf("models %+v", models)
	}
	if resp, err := http.Get(sf.url("decode-0", "/health")); err != nil || resp.StatusCode != 200 {
		t.Errorf("health: %v %v", resp, err)
	}
	if got := metricValue(t, reg.MetricsURL, metricPrefixQueries); got == 0 {
		t.Errorf("prefix cache queries still 0 after requests")
	}
}

// TestEngineStreaming: a streamed completion sends one text_completion chunk per
// token (the same text as unstreamed), finish_reason on the last, a usage chunk when
// asked, then [DONE]; a streamed chat sends the assistant role first.
func TestEngineStreaming(t *testing.T) {
	sf := startServingFleet(t, smallFleet(), nil, 20, nil)
	url := sf.url("decode-0", "/v1/completions")
	prompt := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	want := generate(t, url, map[string]any{"prompt": prompt, "max_tokens": 7}, nil).Choices[0].Text
	events := stream(t, url, map[string]any{"prompt": prompt, "max_tokens": 7, "min_tokens": 7, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
	if len(events) != 7+2 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	var text strings.Builder
	for i, e := range events[:7] {
		c := decodeAnswer(t, []byte(e))
		if c.Object != "text_completion" || len(c.Choices) != 1 || (c.Choices[0].FinishReason != nil) != (i == 6) {
			t.Fatalf("chunk %d: %s", i, e)
		}
		text.WriteString(c.Choices[0].Text)
	}
	if text.String() != want {
		t.Errorf("streamed %q, unstreamed %q", text.String(), want)
	}
	u := decodeAnswer(t, []byte(events[7]))
	if u.Usage == nil || u.Usage.PromptTokens != 20 || u.Usage.CompletionTokens != 7 || len(u.Choices) != 0 || !strings.Contains(events[7], `"choices":[]`) {
		t.Errorf("usage chunk %s", events[7])
	}
	// Without include_usage: no usage chunk.
	if ev := stream(t, url, map[string]any{"prompt": prompt, "max_tokens": 3, "stream": true}); len(ev) != 4 {
		t.Errorf("events without usage %q", ev)
	}

	chatURL := sf.url("decode-0", "/v1/chat/completions")
	msgs := []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there!"}}
	c := generate(t, chatURL, map[string]any{"messages": msgs, "max_completion_tokens": 4}, nil)
	if c.Object != "chat.completion" || c.Choices[0].Message.Role != "assistant" || len(strings.Fields(c.Choices[0].Message.Content)) != 4 {
		t.Fatalf("chat answer %+v", c)
	}
	ev := stream(t, chatURL, map[string]any{"messages": msgs, "max_tokens": 4, "stream": true, "stream_options": map[string]any{"include_usage": true}})
	if len(ev) != 1+4+2 {
		t.Fatalf("chat events %q", ev)
	}
	first := decodeAnswer(t, []byte(ev[0]))
	if first.Object != "chat.completion.chunk" || first.Choices[0].Delta.Role != "assistant" {
		t.Errorf("first chat chunk %s", ev[0])
	}
	var content strings.Builder
	for _, e := range ev[1:5] {
		d := decodeAnswer(t, []byte(e))
		if d.Choices[0].Delta.Content == nil {
			t.Fatalf("chunk %s", e)
		}
		content.WriteString(*d.Choices[0].Delta.Content)
	}
	if content.String() != c.Choices[0].Message.Content {
		t.Errorf("chat streamed %q, unstreamed %q", content.String(), c.Choices[0].Message.Content)
	}
	st, tb := post(t, sf.url("decode-0", "/tokenize"), map[string]any{"messages": msgs, "add_generation_prompt": true}, nil)
	var tok struct{ Count int }
	_ = json.Unmarshal(tb, &tok)
	if u := decodeAnswer(t, []byte(ev[5])); st != 200 || u.Usage == nil || u.Usage.PromptTokens != tok.Count {
		t.Errorf("chat usage %s, tokenize %d %s", ev[5], st, tb)
	}
}

// TestEngineRefusals: hostile bodies get OpenAI error bodies with precise statuses,
// and each refusal is counted by reason.
func TestEngineRefusals(t *testing.T) {
	sf := startServingFleet(t, smallFleet(), nil, 20, func(c *RunConfig) { c.MaxBodyBytes = 4096 })
	url := sf.url("decode-0", "/v1/completions")
	cases := []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		code   string
	}{
		{"malformed JSON", `{"prompt": "hi"`, nil, 400, rejectInvalidJSON},
		{"trailing data", `{"prompt": "hi"} {}`, nil, 400, rejectInvalidJSON},
		{"not an object", `[1,2]`, nil, 400, rejectInvalidJSON},
		{"too large", `{"prompt": "` + strings.Repeat("a", 5000) + `"}`, nil, 413, rejectBodyTooLarge},
		{"no prompt", `{"max_tokens": 3}`, nil, 400, rejectInvalidField},
		{"empty prompt", `{"prompt": ""}`, nil, 400, rejectInvalidField},
		{"token out of vocab", `{"prompt": [1, 128256]}`, nil, 400, rejectInvalidField},
		{"negative token", `{"prompt": [-1]}`, nil, 400, rejectInvalidField},
		{"fractional max_tokens", `{"prompt": "hi", "max_tokens": 1.5}`, nil, 400, rejectInvalidField},
		{"zero max_tokens", `{"prompt": "hi", "max_tokens": 0}`, nil, 400, rejectInvalidField},
		{"huge max_tokens", `{"prompt": "hi", "max_tokens": 99999999999999}`, nil, 400, rejectInvalidField},
		{"min above max", `{"prompt": "hi", "max_tokens": 2, "min_tokens": 3}`, nil, 400, rejectInvalidField},
		{"context too long", `{"prompt": "hi", "max_tokens": 4096}`, nil, 400, rejectPromptTooLong},
		{"n=2", `{"prompt": "hi", "n": 2}`, nil, 400, rejectUnsupported},
		{"batch", `{"prompt": ["a", "b"]}`, nil, 400, rejectUnsupported},
		{"other model", `{"model": "gpt-4", "prompt": "hi"}`, nil, 404, rejectUnknownModel},
		{"long request id", `{"prompt": "hi"}`, map[string]string{"X-Request-Id": strings.Repeat("x", 300)}, 400, rejectRequestIDLong},
	}
	for _, c := range cases {
		st, b := post(t, url, c.body, c.hdr)
		a := decodeAnswer(t, b)
		if st != c.status || a.Error == nil || a.Error.Code != c.code || a.Error.Message == "" || a.Error.Type == "" {
			t.Errorf("%s: %d %s, want %d %s", c.name, st, b, c.status, c.code)
		}
	}
	chat := sf.url("decode-0", "/v1/chat/completions")
	for _, body := range []string{`{"messages": []}`, `{"messages": [{"content": "x"}]}`, `{"messages": "x"}`, `{"messages": [{"role": "user", "content": 5}]}`} {
		if st, b := post(t, chat, body, nil); st != 400 {
			t.Errorf("chat %s: %d %s", body, st, b)
		}
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/completions: %d", resp.StatusCode)
	}
	if v := sf.rejects.Value(rejects.SimHTTP, rejectInvalidJSON); v != 3 {
		t.Errorf("invalid_json counted %v times, want 3", v)
	}
	if v := sf.rejects.Value(rejects.SimHTTP, rejectBodyTooLarge); v != 1 {
		t.Errorf("body_too_large counted %v times, want 1", v)
	}
	// The engine still serves.
	generate(t, url, map[string]any{"prompt": "hi", "max_tokens": 2}, nil)
}

// prefillParams is what a proxy sends the prefill engine (toy_proxy_server.py).
func prefillParams() map[string]any {
	return map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
		"remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
}

// storedTokens replays every KV event batch an engine published and returns the
// token ids of the blocks it stored.
func storedTokens(t *testing.T, reg WorkerRegistration) []uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var toks []uint32
	err := ingest.ZMQReplayer{}.Replay(ctx, reg.KVReplayEndpoint, 0, 5*time.Second, func(m ingest.Message) bool {
		b, err := ingest.DecodeBatch(m.Payload, pb.Engine_ENGINE_SIM)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range b.Events {
			if s := ev.GetStored(); s != nil {
				toks = append(toks, s.GetTokenIds()...)
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// TestEnginePDHandshake: NixlConnector's exchange between a prefill and a decode
// engine. The prefill leg answers one token and kv_transfer_params naming its engine,
// request and blocks, and holds the blocks; the decode leg pulls them, streams
// max_tokens tokens (the first the prefill's token) without computing the prompt
// (its prefill_kv_computed stays 0 while its KV events store the prompt's blocks),
// and the prefill engine frees the blocks after the pull. Params naming nothing
// held, or unreadable, are served by a local prefill.
func TestEnginePDHandshake(t *testing.T) {
	sf := startServingFleet(t, smallFleet(), nil, 20, nil)
	pre, dec := sf.regs["prefill-0"], sf.regs["decode-0"]
	prompt := make([]uint32, 100)
	for i := range prompt {
		prompt[i] = uint32(1000 + 7*i)
	}
	pa := generate(t, pre.HTTPURL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1, "stream": false,
		"kv_transfer_params": prefillParams()}, map[string]string{"X-Request-Id": "pd-1"})
	kv := pa.KV
	if kv == nil || !kv.DoRemotePrefill || kv.DoRemoteDecode || kv.RemoteEngineID == nil || *kv.RemoteEngineID != "prefill-0" ||
		kv.RemoteRequestID == nil || *kv.RemoteRequestID != "pd-1" || len(kv.RemoteBlockIDs) != 7 || kv.RemoteHost == nil ||
		*kv.RemoteHost != "127.0.0.1" || kv.RemotePort == nil || pre.HTTPURL != fmt.Sprintf("http://127.0.0.1:%d", *kv.RemotePort) || kv.TPSize != 1 {
		t.Fatalf("prefill answer kv_transfer_params %+v", kv)
	}
	if pa.Usage.CompletionTokens != 1 || len(strings.Fields(pa.Choices[0].Text)) != 1 {
		t.Errorf("prefill answer %+v", pa)
	}
	if r, u := metricValue(t, pre.MetricsURL, metricRunning), metricValue(t, pre.MetricsURL, metricKVUsage); r != 1 || u != 7.0/256 {
		t.Errorf("prefill engine holding: running %v, kv usage %v (want 1 and 7 blocks)", r, u)
	}
	body := map[string]any{"prompt": prompt, "max_tokens": 6, "min_tokens": nil, "stream": true, "kv_transfer_params": kv}
	ev := stream(t, dec.HTTPURL+"/v1/completions", body)
	if len(ev) != 6+1 {
		t.Fatalf("decode events %q", ev)
	}
	if c := decodeAnswer(t, []byte(ev[0])); c.Choices[0].Text != pa.Choices[0].Text {
		t.Errorf("decode's first token %q, prefill's %q", c.Choices[0].Text, pa.Choices[0].Text)
	}
	if v := metricValue(t, dec.MetricsURL, metricPrefillComputed+"_sum"); v != 0 {
		t.Errorf("decode engine computed %v prompt tokens of a pulled prefill", v)
	}
	eventually(t, "prefill engine frees the pulled blocks", func() bool {
		return metricValue(t, pre.MetricsURL, metricRunning) == 0 && metricValue(t, pre.MetricsURL, metricKVUsage) == 0
	})
	if got := storedTokens(t, dec); len(got) < 96 || !slices.Equal(got[:96], prompt[:96]) {
		t.Errorf("decode engine stored %d tokens, want the prompt's 6 full blocks first", len(got))
	}
	// The hold was taken: the same params again find nothing and are served locally.
	if ev := stream(t, dec.HTTPURL+"/v1/completions", body); len(ev) != 7 {
		t.Errorf("replayed params: %q", ev)
	}
	if v := metricValue(t, dec.MetricsURL, metricPrefillComputed+"_count"); v != 1 {
		t.Errorf("replayed params: %v local prefills on decode, want 1", v)
	}
	for i, bad := range []any{
		map[string]any{"do_remote_prefill": true, "remote_engine_id": "prefill-9", "remote_request_id": "pd-1"},
		map[string]any{"do_remote_prefill": true, "remote_block_ids": "zz"},
		"not an object",
		map[string]any{"do_remote_prefill": true},
	} {
		a := generate(t, dec.HTTPURL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 2, "kv_transfer_params": bad}, nil)
		if a.Usage.CompletionTokens != 2 || a.KV != nil {
			t.Errorf("bad params %d: %+v", i, a)
		}
	}
}

// TestEnginePDHoldExpires: a prefill nobody pulls is freed when its hold expires (in
// simulated time), and a decode leg naming it afterwards computes the prompt itself.
func TestEnginePDHoldExpires(t *testing.T) {
	sf := startServingFleet(t, smallFleet(), nil, 20, func(c *RunConfig) { c.KVHoldTimeout = 2 * time.Second })
	pre, dec := sf.regs["prefill-0"], sf.regs["decode-0"]
	prompt := make([]uint32, 64)
	for i := range prompt {
		prompt[i] = uint32(5 + i)
	}
	pa := generate(t, pre.HTTPURL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1, "kv_transfer_params": prefillParams()}, nil)
	if pa.KV == nil || pa.KV.RemoteRequestID == nil || !strings.HasPrefix(*pa.KV.RemoteRequestID, "prefill-0-") {
		t.Fatalf("prefill answer %+v", pa.KV)
	}
	eventually(t, "the unpulled hold expires", func() bool {
		return metricValue(t, pre.MetricsURL, metricRunning) == 0 && metricValue(t, pre.MetricsURL, metricKVUsage) == 0
	})
	a := generate(t, dec.HTTPURL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 3, "kv_transfer_params": pa.KV}, nil)
	if a.Usage.CompletionTokens != 3 {
		t.Errorf("decode after expiry %+v", a)
	}
	if v := metricValue(t, dec.MetricsURL, metricPrefillComputed+"_sum"); v != 64 {
		t.Errorf("decode after expiry computed %v prompt tokens, want 64", v)
	}
}

// TestEngineKeepServingAfterReport: with KeepServing the engines answer after the
// workload's report (pdrouter dev --sim leaves the idle fleet serving).
func TestEngineKeepServingAfterReport(t *testing.T) {
	sc := DefaultSynthetic()
	sc.Duration = 6 * time.Second
	w, err := Synthetic(sc)
	if err != nil {
		t.Fatal(err)
	}
	w = w.Head(4)
	sf := startServingFleet(t, DefaultFleet(), w, 50, nil)
	if sf.report.Completed != 4 {
		t.Fatalf("report:\n%s", sf.report)
	}
	for _, id := range []string{"prefill-1", "decode-1"} {
		a := generate(t, sf.url(id, "/v1/chat/completions"), map[string]any{"messages": []map[string]any{{"role": "user", "content": "still there?"}}, "max_tokens": 3}, nil)
		if a.Usage.CompletionTokens != 3 {
			t.Errorf("%s after the report: %+v", id, a)
		}
	}
}

// TestEngineClientDisconnect: a client that goes away mid-stream frees the engine's
// sequence (its running count and KV usage fall back to 0).
func TestEngineClientDisconnect(t *testing.T) {
	sf := startServingFleet(t, smallFleet(), nil, 1, nil)
	dec := sf.regs["decode-0"]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _ := json.Marshal(map[string]any{"prompt": "a long story, please", "max_tokens": 3000, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, dec.HTTPURL+"/v1/completions", bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q %v", line, err)
	}
	if r, u := metricValue(t, dec.MetricsURL, metricRunning), metricValue(t, dec.MetricsURL, metricKVUsage); r != 1 || u == 0 {
		t.Fatalf("while streaming: running %v, kv usage %v", r, u)
	}
	cancel()
	resp.Body.Close()
	eventually(t, "the engine frees the abandoned sequence", func() bool {
		return metricValue(t, dec.MetricsURL, metricRunning) == 0 && metricValue(t, dec.MetricsURL, metricKVUsage) == 0
	})
}
