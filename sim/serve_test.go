package sim

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestServeEngines: engines served on their own answer OpenAI completions,
// streamed, timed by the simulator, until closed.
func TestServeEngines(t *testing.T) {
	fc := DefaultFleet()
	fc.Prefill, fc.Decode = 1, 2
	es, err := ServeEngines(fc, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(es.URLs) != 3 || es.URLs["decode-1"] == "" || es.Model != fc.Hardware.ModelName {
		t.Fatalf("engines %+v", es)
	}
	status, body := post(t, es.URLs["decode-1"]+"/v1/completions",
		map[string]any{"model": es.Model, "prompt": []int{1, 2, 3, 4, 5}, "max_tokens": 3, "stream": true}, nil)
	if status != 200 || strings.Count(string(body), "data: {") != 3 || !strings.HasSuffix(strings.TrimSpace(string(body)), "data: [DONE]") {
		t.Fatalf("%d %s", status, body)
	}
	es.Close()
}

// TestSeedSetsTheOutput: with a seed the engine generates the seed's token
// sequence whatever the prompt (so a replayed conversation's next turn
// resends exactly what the engine generated); without one, the prompt
// seeds the output; a seed that is not a 64-bit integer is refused.
func TestSeedSetsTheOutput(t *testing.T) {
	fc := DefaultFleet()
	fc.Prefill, fc.Decode = 1, 1
	es, err := ServeEngines(fc, 50, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	text := func(body map[string]any) string {
		t.Helper()
		body["model"], body["max_tokens"] = es.Model, 6
		status, b := post(t, es.URLs["decode-0"]+"/v1/completions", body, nil)
		var r struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if status != 200 || json.Unmarshal(b, &r) != nil || len(r.Choices) != 1 {
			t.Fatalf("%d %s", status, b)
		}
		return r.Choices[0].Text
	}
	var seed int64 = -7046029254386353131 // a uint64 seed above 2^63, as the workload's, on the wire
	a := text(map[string]any{"prompt": []int{1, 2, 3}, "seed": seed})
	b := text(map[string]any{"prompt": []int{9, 8, 7, 6}, "seed": seed})
	var toks []uint32
	for i := range 6 {
		toks = append(toks, (&Request{Output: uint64(seed)}).OutputToken(i))
	}
	if want := tokensText(toks); a != want || b != want {
		t.Fatalf("seed %d: got %q and %q, want the seed's tokens %q", uint64(seed), a, b, want)
	}
	if c := text(map[string]any{"prompt": []int{1, 2, 3}}); c == a {
		t.Fatalf("no seed: the prompt seeds the output, got the seed's %q", c)
	}
	status, body := post(t, es.URLs["decode-0"]+"/v1/completions", `{"prompt":[1],"max_tokens":2,"seed":1.5}`, nil)
	if status != 400 || !strings.Contains(string(body), `"seed"`) {
		t.Fatalf("%d %s", status, body)
	}
}
