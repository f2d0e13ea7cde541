package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func shortSynthetic(t *testing.T, n int) *Workload {
	t.Helper()
	sc := DefaultSynthetic()
	sc.Duration = 6 * time.Second
	w, err := Synthetic(sc)
	if err != nil {
		t.Fatal(err)
	}
	return w.Head(n)
}

// TestRunViaOpenAIAgainstEngine: the OpenAI driver replays a workload straight at one
// engine's API and reports every request done, with client-measured TTFT and ITL in
// simulated time and no placement (a client cannot see one).
func TestRunViaOpenAIAgainstEngine(t *testing.T) {
	fc := DefaultFleet()
	fc.Prefill, fc.Decode = 1, 1
	sf := startServingFleet(t, fc, nil, 10, nil)
	w := shortSynthetic(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := RunViaOpenAI(ctx, OpenAIRunConfig{BaseURL: sf.url("decode-0", "/v1"), Model: fc.Hardware.ModelName, TimeScale: 10}, w, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	multi := 0
	for _, r := range w.Requests {
		if r.OutputLen >= 2 {
			multi++
		}
	}
	if rep.Completed != 8 || rep.Failed != 0 || rep.Unplaced != 8 || rep.Local+rep.Remote != 0 || rep.ITL.N != multi || rep.DecisionIDs != 0 {
		t.Fatalf("report:\n%s", rep)
	}
	// A decode step of the default model is about 9 ms of simulated time (the
	// offline run of this workload agrees); HTTP on loopback adds a little, scaled
	// by 10. Generous bounds: a stall of the machine is scaled too.
	if rep.TTFT.P50 <= 0 || rep.ITL.P50 <= 0 || rep.ITL.P50 > 2*time.Second {
		t.Errorf("TTFT p50 %v, ITL p50 %v", rep.TTFT.P50, rep.ITL.P50)
	}
	t.Logf("via OpenAI at one engine:\n%s", rep)

	// A URL that answers errors: every request fails, none is left unfinished.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":{"message":"no"}}`, http.StatusServiceUnavailable)
	}))
	defer bad.Close()
	rep, err = RunViaOpenAI(ctx, OpenAIRunConfig{BaseURL: bad.URL + "/v1", TimeScale: 1000}, w, nil, nil)
	if err != nil || rep.Failed != 8 || rep.Completed != 0 {
		t.Fatalf("against errors: %v\n%s", err, rep)
	}
}

// TestRunViaOpenAICountsOverContext: a request longer than the engines' context is
// answered 400 context_length_exceeded, and a live run counts it among the failed as
// over the context, as the offline fleet does, not as a failure of the router.
func TestRunViaOpenAICountsOverContext(t *testing.T) {
	fc := DefaultFleet()
	fc.Prefill, fc.Decode = 1, 1
	w := shortSynthetic(t, 8)
	// A context that the longer half of the workload exceeds.
	var lens []int
	for _, r := range w.Requests {
		lens = append(lens, r.PromptLen+r.OutputLen)
	}
	slices.Sort(lens)
	fc.Hardware.MaxModelLen = lens[len(lens)/2]
	over := 0
	for _, n := range lens {
		if n > fc.Hardware.MaxModelLen {
			over++
		}
	}
	if over == 0 || over == len(lens) {
		t.Fatalf("context %d splits no workload of lengths %v", fc.Hardware.MaxModelLen, lens)
	}
	sf := startServingFleet(t, fc, nil, 10, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := RunViaOpenAI(ctx, OpenAIRunConfig{BaseURL: sf.url("decode-0", "/v1"), Model: fc.Hardware.ModelName, TimeScale: 10}, w, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != over || rep.OverContext != over || rep.Completed != len(lens)-over {
		t.Fatalf("context %d, %d requests over it; report:\n%s", fc.Hardware.MaxModelLen, over, rep)
	}
}

// doorStub is the stub router plus a minimal door: POST /v1/completions goes to
// decode-0 alone (local) or, every other request, through NixlConnector's
// exchange with prefill-0 first (remote), as pdrouter's door drives it, and the
// answer is streamed back with the door's decision headers.
type doorStub struct {
	*stubRouter
	n *atomic.Int64
}

func (d doorStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/completions" {
		d.stubRouter.ServeHTTP(w, r)
		return
	}
	d.mu.Lock()
	urls := map[string]string{}
	for _, reg := range d.workers {
		urls[reg.WorkerID] = reg.HTTPURL
	}
	d.mu.Unlock()
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	post := func(url string, b map[string]any) (*http.Response, error) {
		raw, _ := json.Marshal(b)
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, url+"/v1/completions", bytes.NewReader(raw))
		req.Header = r.Header.Clone()
		return http.DefaultClient.Do(req)
	}
	mode := ModeLocal
	if d.n.Add(1)%2 == 0 {
		mode = ModeRemote
		pre := maps.Clone(body)
		pre["stream"], pre["max_tokens"] = false, 1
		delete(pre, "stream_options")
		delete(pre, "min_tokens")
		pre["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false}
		resp, err := post(urls["prefill-0"], pre)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		var ans struct {
			KV map[string]any `json:"kv_transfer_params"`
		}
		err = json.NewDecoder(resp.Body).Decode(&ans)
		resp.Body.Close()
		if err != nil || ans.KV == nil {
			http.Error(w, fmt.Sprintf("prefill answer: %v", err), http.StatusBadGateway)
			return
		}
		body["kv_transfer_params"] = ans.KV
	}
	resp, err := post(urls["decode-0"], body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.Header().Set("X-Pdrouter-Decision-Id", "dec-"+r.Header.Get("X-Request-Id"))
	w.Header().Set("X-Pdrouter-Mode", mode)
	w.Header().Set("X-Pdrouter-Reason", "stub_"+mode)
	w.WriteHeader(resp.StatusCode)
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			http.NewResponseController(w).Flush()
		}
		if err == io.EOF || err != nil {
			return
		}
	}
}

// TestRunFleetViaDoor: with OpenAIBaseURL, RunFleet registers the engines (with
// their http_url), sends the workload through the URL instead of POST /v1/route,
// and reports what the client saw (latencies, decision ids, the placement the
// door's headers named) and what the engines did, as a routed run's report does:
// every prompt computed once (locally on the decode worker, or on the prefill
// worker and pulled), KV transferred, the queues sampled.
func TestRunFleetViaDoor(t *testing.T) {
	stub := &stubRouter{events: map[string][]string{}}
	srv := httptest.NewServer(doorStub{stub, new(atomic.Int64)})
	defer srv.Close()
	w := shortSynthetic(t, 6)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := RunFleet(ctx, RunConfig{RouterURL: srv.URL, OpenAIBaseURL: srv.URL + "/v1", Fleet: DefaultFleet(), TimeScale: 50, Progress: -1}, w, RunDeps{})
	if err != nil {
		t.Fatal(err)
	}
	var prompt int64
	for _, r := range w.Requests {
		prompt += int64(r.PromptLen)
	}
	if rep.Completed != 6 || rep.DecisionIDs != 6 || len(rep.Decisions) != 6 || rep.Decisions[0] != "dec-"+w.Requests[0].ID ||
		rep.Unplaced != 0 || rep.Local != 3 || rep.Remote != 3 || rep.Reasons["stub_local"] != 3 || rep.Reasons["stub_remote"] != 3 {
		t.Fatalf("report:\n%s", rep)
	}
	if rep.PromptTokens != prompt || rep.TransferTokens <= 0 || rep.PrefillComputedOnPrefill <= 0 || rep.PrefillComputedOnDecode <= 0 ||
		rep.PrefillComputedOnPrefill+rep.PrefillComputedOnDecode+rep.CacheHitTokens != prompt || rep.DecodeKVMax <= 0 {
		t.Fatalf("engine-side figures (%d prompt tokens sent):\n%s", prompt, rep)
	}
	stub.mu.Lock()
	defer stub.mu.Unlock()
	if stub.routed != 0 || len(stub.workers) != 4 || stub.workers[0].HTTPURL == "" {
		t.Errorf("routed %d, workers %+v", stub.routed, stub.workers)
	}
}
