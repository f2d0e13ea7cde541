package sim

import (
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
