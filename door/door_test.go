package door

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pdrouter/pdrouter/door/doortest"
	"github.com/pdrouter/pdrouter/internal/rejects"
)

// rig is a door served over real HTTP, with an in-memory decider and
// outcome log, forwarding to real HTTP engines.
type rig struct {
	t        testing.TB
	door     *Door
	srv      *httptest.Server
	dec      *fakeDecider
	outcomes *fakeOutcomes
	reg      *prometheus.Registry
}

func newRig(t testing.TB, plan []Decision, tokenizers []string, opts ...Option) *rig {
	t.Helper()
	r := &rig{t: t, dec: &fakeDecider{plan: plan}, outcomes: &fakeOutcomes{}, reg: prometheus.NewRegistry()}
	d, err := New(Deps{Decider: r.dec, Fleet: fakeFleet{tokenizers}, Outcomes: r.outcomes}, append([]Option{WithMetrics(r.reg)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	r.door = d
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	d.Mount(e.Group("/v1"))
	r.srv = httptest.NewServer(e)
	t.Cleanup(r.srv.Close)
	return r
}

func (r *rig) post(path, body string) (*http.Response, []byte) {
	r.t.Helper()
	resp, err := http.Post(r.srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// waitOutcomes waits for n outcomes: the door appends a request's last
// outcome after the client has its whole answer.
func (r *rig) waitOutcomes(n int) []Outcome {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(r.outcomes.list()) < n && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	return r.outcomes.list()
}

func local(e *doortest.Engine) Decision {
	return Decision{Reason: "prefill_local_test", Decode: Worker{ID: e.ID, HTTPURL: e.URL()}}
}
func remote(p, d *doortest.Engine) Decision {
	return Decision{Remote: true, Reason: "prefill_remote_test", Prefill: Worker{ID: p.ID, HTTPURL: p.URL()}, Decode: Worker{ID: d.ID, HTTPURL: d.URL()}}
}

// events splits an SSE body into its data payloads.
func events(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, v)
		}
	}
	return out
}

func openAIError(t *testing.T, body []byte) (code, typ, msg string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Code == nil {
		t.Fatalf("not an OpenAI error body: %s", body)
	}
	return *e.Error.Code, e.Error.Type, e.Error.Message
}

func metric(t *testing.T, c prometheus.Collector) float64 { t.Helper(); return testutil.ToFloat64(c) }

// TestLocalStreamRelayAndMeasure: a streamed completion on the local path
// goes to the decode worker as the client sent it (plus include_usage),
// every token chunk is relayed, the usage chunk the client did not ask
// for is dropped, and the outcome carries TTFT, mean ITL and the usage's
// output tokens.
func TestLocalStreamRelayAndMeasure(t *testing.T) {
	eng := doortest.New(t, "d1")
	eng.Tokens, eng.Gap = 5, 20*time.Millisecond
	r := newRig(t, []Decision{local(eng)}, []string{eng.URL()})
	resp, body := r.post("/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":5,"stream":true,"temperature":0.5}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get(HeaderDecisionID) != "dec-1" ||
		resp.Header.Get(HeaderMode) != "local" || resp.Header.Get(HeaderReason) != "prefill_local_test" {
		t.Fatalf("got %d %v %s", resp.StatusCode, resp.Header, body)
	}
	ev := events(t, body)
	if len(ev) != 6 || ev[5] != "[DONE]" || strings.Contains(string(body), "usage") {
		t.Fatalf("want 5 token chunks and [DONE], no usage chunk; got %q", ev)
	}
	got := eng.Requests()[0]
	if got["temperature"] != 0.5 || got["kv_transfer_params"] != nil || got["stream_options"].(map[string]any)["include_usage"] != true {
		t.Fatalf("the engine got %v", got)
	}
	if dr := r.dec.got[0]; len(dr.TokenIDs) != 3 || dr.MaxTokens != 5 || dr.Model != "m" || dr.RetryOf != "" {
		t.Fatalf("decision request %+v", dr)
	}
	if eng.Tokenizes() != 0 {
		t.Fatal("token ids in the request must not be tokenized again")
	}
	o := r.waitOutcomes(1)
	if len(o) != 1 || o[0].Kind != Completed || o[0].DecisionID != "dec-1" || *o[0].OutputTokens != 5 {
		t.Fatalf("outcomes %+v", o)
	}
	if *o[0].TTFT <= 0 || *o[0].ITLMean < 10*time.Millisecond || *o[0].ITLMean > 2*time.Second {
		t.Fatalf("ttft %s itl %s; the engine spaced tokens 20ms apart", *o[0].TTFT, *o[0].ITLMean)
	}
	if metric(t, r.door.metrics.requests.WithLabelValues(endpointCompletions, pathLocal, resultOK)) != 1 {
		t.Fatal("request not counted")
	}
}

// TestRemoteHandshake: the disaggregated path sends the prefill worker the
// request with do_remote_decode, max_tokens 1, no streaming, no
// stream_options or min_tokens, then the decode worker the client's
// request with the prefill's kv_transfer_params, both under one
// X-Request-Id; prefill_done is written before completed.
func TestRemoteHandshake(t *testing.T) {
	pre, dec := doortest.New(t, "p1"), doortest.New(t, "d1")
	r := newRig(t, []Decision{remote(pre, dec)}, []string{dec.URL()})
	resp, body := r.post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":9,"min_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderMode) != "remote" || resp.Header.Get(HeaderReason) != "prefill_remote_test" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	p := pre.Requests()[0]
	kv, _ := p["kv_transfer_params"].(map[string]any)
	if p["stream"] != false || p["max_tokens"] != 1.0 || p["max_completion_tokens"] != 1.0 || p["stream_options"] != nil || p["min_tokens"] != nil ||
		kv["do_remote_decode"] != true || kv["do_remote_prefill"] != false {
		t.Fatalf("prefill leg %v", p)
	}
	d := dec.Requests()[0]
	dkv, _ := d["kv_transfer_params"].(map[string]any)
	if d["stream"] != true || d["max_completion_tokens"] != 9.0 || d["min_tokens"] != 2.0 || dkv["do_remote_prefill"] != true || dkv["remote_engine_id"] != "p1" {
		t.Fatalf("decode leg %v", d)
	}
	if pre.Headers()[0].Get("X-Request-Id") == "" || pre.Headers()[0].Get("X-Request-Id") != dec.Headers()[0].Get("X-Request-Id") {
		t.Fatal("both legs must carry the request id")
	}
	if dec.Tokenizes() != 1 {
		t.Fatalf("chat messages are tokenized once by the decode worker; got %d", dec.Tokenizes())
	}
	ev := events(t, body)
	if !strings.Contains(ev[0], `"role":"assistant"`) || !strings.Contains(ev[len(ev)-2], `"usage"`) || ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("the client asked for usage: %q", ev)
	}
	o := r.waitOutcomes(2)
	if len(o) != 2 || o[0].Kind != PrefillDone || o[1].Kind != Completed || *o[1].OutputTokens != 4 {
		t.Fatalf("outcomes %+v", o)
	}
}

// TestNonStreamLocal: a whole answer is relayed as the engine sent it and
// measured (TTFT at the answer, output tokens from usage).
func TestNonStreamLocal(t *testing.T) {
	eng := doortest.New(t, "d1")
	r := newRig(t, []Decision{local(eng)}, []string{eng.URL()})
	resp, body := r.post("/v1/completions", `{"model":"m","prompt":"hello","max_tokens":4}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"text_completion"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	o := r.waitOutcomes(1)
	if len(o) != 1 || o[0].Kind != Completed || *o[0].OutputTokens != 4 || o[0].TTFT == nil {
		t.Fatalf("outcomes %+v", o)
	}
}

// TestTokenizeCache: the same prompt is tokenized once; another prompt,
// or the same text for another model, is not served from the cache.
func TestTokenizeCache(t *testing.T) {
	eng := doortest.New(t, "d1")
	r := newRig(t, []Decision{local(eng)}, []string{eng.URL()})
	for _, b := range []string{`{"model":"m","prompt":"abc"}`, `{"model":"m","prompt":"abc"}`, `{"model":"m","prompt":"abd"}`, `{"model":"n","prompt":"abc"}`} {
		if resp, body := r.post("/v1/completions", b); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	if eng.Tokenizes() != 3 || metric(t, r.door.metrics.cache.WithLabelValues("hit")) != 1 {
		t.Fatalf("tokenized %d times, want 3 (one hit)", eng.Tokenizes())
	}
	if ids := r.dec.got[0].TokenIDs; len(ids) != 3 || ids[0] != 'a' {
		t.Fatalf("token ids %v", ids)
	}
}

// TestTokenCacheBound: the cache holds at most its token budget, evicting
// the least recently used.
func TestTokenCacheBound(t *testing.T) {
	c := newTokenCache(10)
	k := func(b byte) [32]byte { return [32]byte{b} }
	c.put(k(1), make([]uint32, 4))
	c.put(k(2), make([]uint32, 4))
	c.get(k(1))
	c.put(k(3), make([]uint32, 4))
	if _, ok := c.get(k(2)); ok || c.len() != 2 || c.held != 8 {
		t.Fatalf("want 2 evicted, 1 and 3 kept; len %d held %d", c.len(), c.held)
	}
	c.put(k(4), make([]uint32, 11))
	if _, ok := c.get(k(4)); ok {
		t.Fatal("an entry over the whole budget is not cached")
	}
}

// TestRetryOnAnotherWorker: a worker that answers 500 before any token
// gets the request retried once on a new decision linked to the failed
// one, excluding the failed worker; the failed decision gets a cancelled
// outcome with the error code.
func TestRetryOnAnotherWorker(t *testing.T) {
	bad, good := doortest.New(t, "bad"), doortest.New(t, "good")
	bad.Status = 500
	// The retry's decision has no reason: the failed attempt's must not
	// stay in the answer's headers.
	r := newRig(t, []Decision{local(bad), {Decode: Worker{ID: good.ID, HTTPURL: good.URL()}}}, []string{good.URL()})
	resp, body := r.post("/v1/completions", `{"model":"m","prompt":[1,2],"stream":true}`)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderDecisionID) != "dec-2" || resp.Header.Get(HeaderMode) != "local" ||
		resp.Header.Values(HeaderReason) != nil {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
	if len(r.dec.got) != 2 || r.dec.got[1].RetryOf != "dec-1" || len(r.dec.got[1].Exclude) != 1 || r.dec.got[1].Exclude[0] != "bad" ||
		r.dec.got[1].RequestID == r.dec.got[0].RequestID {
		t.Fatalf("decision requests %+v", r.dec.got)
	}
	o := r.waitOutcomes(2)
	if len(o) != 2 || o[0].Kind != Cancelled || o[0].DecisionID != "dec-1" || o[0].ErrorCode != "upstream_error" || o[1].Kind != Completed {
		t.Fatalf("outcomes %+v", o)
	}
	if metric(t, r.door.metrics.retries.WithLabelValues("upstream_error")) != 1 || metric(t, r.door.metrics.retries.WithLabelValues("upstream_unreachable")) != 0 {
		t.Fatal("retry not counted under its reason")
	}
}

// TestRetryOnlyOnce: when the retry fails too the client gets the error
// in OpenAI's shape, and there is no third decision.
func TestRetryOnlyOnce(t *testing.T) {
	bad := doortest.New(t, "bad")
	bad.Status = 503
	r := newRig(t, []Decision{local(bad)}, []string{bad.URL()})
	resp, body := r.post("/v1/completions", `{"model":"m","prompt":[1]}`)
	code, typ, _ := openAIError(t, body)
	if resp.StatusCode != 502 || code != "upstream_error" || typ != typeServer || len(r.dec.got) != 2 {
		t.Fatalf("%d %s after %d decisions", resp.StatusCode, body, len(r.dec.got))
	}
}

// TestEngineClientErrorNotRetried: a 400 from the engine is the request's
// fault: passed to the client, not retried.
func TestEngineClientErrorNotRetried(t *testing.T) {
	eng := doortest.New(t, "d")
	eng.Status = 400
	r := newRig(t, []Decision{local(eng)}, nil)
	resp, body := r.post("/v1/completions", `{"model":"m","prompt":[1]}`)
	if _, typ, msg := openAIError(t, body); resp.StatusCode != 400 || typ != typeInvalidRequest || !strings.Contains(msg, "engine down") || len(r.dec.got) != 1 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// TestEngineClientErrorKeepsItsCode: the code of an engine's client error,
// context_length_exceeded say, reaches the client, which acts on it (shortens
// the prompt); a code that is not a plain identifier does not.
func TestEngineClientErrorKeepsItsCode(t *testing.T) {
	for _, c := range []struct{ engineCode, want string }{
		{`"context_length_exceeded"`, "context_length_exceeded"},
		{`400`, "upstream_error"},
		{`"Bad\nCode"`, "upstream_error"},
		{`"` + strings.Repeat("x", 65) + `"`, "upstream_error"},
	} {
		eng := doortest.New(t, "d")
		eng.Status = 400
		eng.ErrorBody = `{"error":{"message":"This model's maximum context length is 10 tokens.","type":"invalid_request_error","param":"prompt","code":` + c.engineCode + `}}`
		r := newRig(t, []Decision{local(eng)}, nil)
		resp, body := r.post("/v1/completions", `{"model":"m","prompt":[1]}`)
		code, typ, msg := openAIError(t, body)
		if resp.StatusCode != 400 || typ != typeInvalidRequest || code != c.want || !strings.Contains(msg, "maximum context length") {
			t.Errorf("engine code %s: %d %s", c.engineCode, resp.StatusCode, body)
		}
	}
}

// TestClientDisconnectCancelsUpstream: a client that goes away mid-stream
// cancels the engine's request, and the outcome is cancelled.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	eng := doortest.New(t, "d")
	eng.Tokens, eng.Gap = 1000, 50*time.Millisecond
	r := newRig(t, []Decision{local(eng)}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", r.srv.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":[1],"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-eng.Cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the engine's request was not cancelled")
	}
	o := r.waitOutcomes(1)
	if len(o) != 1 || o[0].Kind != Cancelled || o[0].ErrorCode != "client_disconnected" {
		t.Fatalf("outcomes %+v", o)
	}
	if metric(t, r.door.metrics.requests.WithLabelValues(endpointCompletions, pathLocal, resultCancelled)) != 1 {
		t.Fatal("not counted as cancelled")
	}
}

// TestBackpressure429: past --door-max-in-flight the door answers 429
// with Retry-After in OpenAI's shape, and counts it.
func TestBackpressure429(t *testing.T) {
	eng := doortest.New(t, "d")
	eng.Hang = 2 * time.Second
	r := newRig(t, []Decision{local(eng)}, nil, WithMaxInFlight(1))
	done := make(chan struct{})
	go func() { defer close(done); r.post("/v1/completions", `{"model":"m","prompt":[1]}`) }()
	deadline := time.Now().Add(10 * time.Second)
	for metric(t, r.door.metrics.inFlight) != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	resp, body := r.post("/v1/completions", `{"model":"m","prompt":[1]}`)
	code, typ, _ := openAIError(t, body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || code != "too_many_requests" || typ != typeRateLimit {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
	if r.door.metrics.rejects.Value(rejects.Door, reasonInFlight) != 1 {
		t.Fatal("not counted")
	}
	<-done
}

// TestHostileUpstream: an engine that sends a line over the bound, a chunk
// that is not an OpenAI chunk, nothing before the first-byte timeout, or
// headers and then no event, is refused precisely, counted, and (as
// nothing reached the client) retried on another worker.
func TestHostileUpstream(t *testing.T) {
	for _, c := range []struct {
		name   string
		setup  func(e *doortest.Engine)
		reason string
	}{
		{"huge line", func(e *doortest.Engine) { e.HugeLn = 8 << 10 }, reasonLineTooLong},
		{"garbage chunk", func(e *doortest.Engine) { e.Garbage = true }, reasonMalformedChunk},
		{"slow first byte", func(e *doortest.Engine) { e.Hang = 5 * time.Second }, reasonFirstByte},
		{"slow first event", func(e *doortest.Engine) { e.SlowEv = 5 * time.Second }, reasonFirstByte},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad, good := doortest.New(t, "bad"), doortest.New(t, "good")
			c.setup(bad)
			r := newRig(t, []Decision{local(bad), local(good)}, nil, WithMaxUpstreamLineBytes(4<<10),
				WithUpstreamTimeouts(time.Second, 300*time.Millisecond, time.Minute))
			resp, body := r.post("/v1/completions", `{"model":"m","prompt":[1],"stream":true}`)
			if resp.StatusCode != 200 || len(events(t, body)) != 5 || resp.Header.Get(HeaderDecisionID) != "dec-2" {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if r.door.metrics.rejects.Value(rejects.DoorUpstream, c.reason) != 1 {
				t.Fatalf("%s not counted", c.reason)
			}
		})
	}
}

// TestMidStreamFailure: a malformed chunk after tokens reached the client
// ends the stream with an OpenAI error event; no retry (the client has
// seen tokens).
func TestMidStreamFailure(t *testing.T) {
	eng := doortest.New(t, "d")
	eng.NoDone = true
	r := newRig(t, []Decision{local(eng)}, nil)
	resp, body := r.post("/v1/completions", `{"model":"m","prompt":[1],"stream":true}`)
	ev := events(t, body)
	if resp.StatusCode != 200 || !strings.Contains(ev[len(ev)-1], `"upstream_truncated"`) || len(r.dec.got) != 1 {
		t.Fatalf("%d %q", resp.StatusCode, ev)
	}
	if o := r.waitOutcomes(1); len(o) != 1 || o[0].Kind != Cancelled || o[0].ErrorCode != "upstream_truncated" || *o[0].OutputTokens != 4 {
		t.Fatalf("outcomes %+v", o)
	}
}

// TestClientLimits: the body, messages and prompt ids bounds answer 413 or
// 400 in OpenAI's shape and count their reason.
func TestClientLimits(t *testing.T) {
	eng := doortest.New(t, "d")
	r := newRig(t, []Decision{local(eng)}, nil, WithMaxBodyBytes(2048), WithMaxMessages(2), WithMaxPromptTokens(3))
	for _, c := range []struct {
		path, body string
		status     int
		code       string
		reason     string
	}{
		{"/v1/completions", `{"model":"m","prompt":"` + strings.Repeat("a", 4096) + `"}`, 413, "body_too_large", reasonBodyTooLarge},
		{"/v1/chat/completions", `{"model":"m","messages":[{},{},{}]}`, 400, "too_many_messages", reasonTooManyMsgs},
		{"/v1/completions", `{"model":"m","prompt":[1,2,3,4]}`, 400, "too_many_tokens", reasonTooManyTokens},
		{"/v1/completions", `{"model":"m","prompt":[1,2`, 400, "invalid_json", reasonInvalidJSON},
		{"/v1/completions", `{"prompt":[1]}`, 400, "invalid_value", reasonInvalidRequest},
	} {
		resp, body := r.post(c.path, c.body)
		code, _, _ := openAIError(t, body)
		if resp.StatusCode != c.status || code != c.code {
			t.Errorf("%s: got %d %s, want %d %s", c.body[:min(40, len(c.body))], resp.StatusCode, body, c.status, c.code)
		}
		if r.door.metrics.rejects.Value(rejects.Door, c.reason) == 0 {
			t.Errorf("%s not counted", c.reason)
		}
	}
}

// TestModels lists the fleet's models in OpenAI's shape.
func TestModels(t *testing.T) {
	r := newRig(t, []Decision{{}}, nil)
	resp, err := http.Get(r.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if string(b) != `{"object":"list","data":[{"id":"m","object":"model","created":0,"owned_by":"pdrouter"}]}` {
		t.Fatalf("%s", b)
	}
}

// TestClientKVTransferParamsRefused: kv_transfer_params tell a decode
// engine where to pull KV blocks from (remote_host, remote_port); only the
// door may set them, from the prefill leg's answer. A client's own, on
// either endpoint and either path, is refused before any engine is called,
// and counted.
func TestClientKVTransferParamsRefused(t *testing.T) {
	const kv = `"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"x","remote_block_ids":[1],"remote_host":"10.9.9.9","remote_port":5600}`
	for _, c := range []struct {
		name, path, body string
		plan             func(p, d *doortest.Engine) Decision
	}{
		{"local completion", "/v1/completions", `{"model":"m","prompt":[1,2],"stream":true,` + kv + `}`, func(_, d *doortest.Engine) Decision { return local(d) }},
		{"local chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],` + kv + `}`, func(_, d *doortest.Engine) Decision { return local(d) }},
		{"remote completion", "/v1/completions", `{"model":"m","prompt":[1,2],` + kv + `}`, remote},
	} {
		t.Run(c.name, func(t *testing.T) {
			pre, dec := doortest.New(t, "p"), doortest.New(t, "d")
			r := newRig(t, []Decision{c.plan(pre, dec)}, []string{dec.URL()})
			resp, body := r.post(c.path, c.body)
			var e struct {
				Error struct {
					Param *string `json:"param"`
				} `json:"error"`
			}
			_ = json.Unmarshal(body, &e)
			code, typ, _ := openAIError(t, body)
			if resp.StatusCode != 400 || code != "router_owned_field" || typ != typeInvalidRequest || e.Error.Param == nil || *e.Error.Param != "kv_transfer_params" {
				t.Fatalf("got %d %s", resp.StatusCode, body)
			}
			if n := len(pre.Requests()) + len(dec.Requests()); n != 0 || len(r.dec.got) != 0 {
				t.Fatalf("the engines got %d requests, the decider %d", n, len(r.dec.got))
			}
			if r.door.metrics.rejects.Value(rejects.Door, reasonRouterOwned) != 1 {
				t.Fatal("not counted")
			}
		})
	}
}

// sumRetries adds pdrouter_door_retries_total over its reasons.
func sumRetries(t *testing.T, v *prometheus.CounterVec) float64 {
	t.Helper()
	n := 0.0
	for _, r := range retryReasons {
		n += metric(t, v.WithLabelValues(r))
	}
	return n
}
