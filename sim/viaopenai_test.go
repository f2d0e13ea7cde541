package sim

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
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

// doorStub is the stub router plus a minimal door: POST /v1/completions is proxied
// to decode-0's API, streamed, with a decision id header.
type doorStub struct{ *stubRouter }

func (d doorStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/completions" {
		d.stubRouter.ServeHTTP(w, r)
		return
	}
	d.mu.Lock()
	var target string
	for _, reg := range d.workers {
		if reg.WorkerID == "decode-0" {
			target = reg.HTTPURL
		}
	}
	d.mu.Unlock()
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, target+"/v1/completions", r.Body)
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.Header().Set("X-Pdrouter-Decision-Id", "dec-"+r.Header.Get("X-Request-Id"))
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
// and reports what the client saw, decision ids counted.
func TestRunFleetViaDoor(t *testing.T) {
	stub := &stubRouter{events: map[string][]string{}}
	srv := httptest.NewServer(doorStub{stub})
	defer srv.Close()
	w := shortSynthetic(t, 6)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := RunFleet(ctx, RunConfig{RouterURL: srv.URL, OpenAIBaseURL: srv.URL + "/v1", Fleet: DefaultFleet(), TimeScale: 50, Progress: -1}, w, RunDeps{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != 6 || rep.DecisionIDs != 6 || rep.Unplaced != 6 {
		t.Fatalf("report:\n%s", rep)
	}
	stub.mu.Lock()
	defer stub.mu.Unlock()
	if stub.routed != 0 || len(stub.workers) != 4 || stub.workers[0].HTTPURL == "" {
		t.Errorf("routed %d, workers %+v", stub.routed, stub.workers)
	}
}
