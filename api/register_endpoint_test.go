package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestRegisterBindAddressRefused: an engine's own bind address (vLLM's
// tcp://*:5557, or 0.0.0.0, ::) names no host ingest can dial, so the
// registration is answered 422 on the field, saying what to give instead;
// a reachable host:port (or ipc://, inproc://) is accepted.
func TestRegisterBindAddressRefused(t *testing.T) {
	h := newHarness(t, kafkatest.Fake(t), harnessOpt{})
	reg := func(id, extra string) string {
		return `{"worker_id":"` + id + `","pool":"decode","model":"m","block_size":16` + extra + `}`
	}
	for _, c := range []struct{ field, ep string }{
		{"kv_events_endpoint", "tcp://*:5557"},
		{"kv_events_endpoint", "tcp://0.0.0.0:5557"},
		{"kv_events_endpoint", "tcp://[::]:5557"},
		{"kv_events_endpoint", "tcp://:5557"},
		{"kv_replay_endpoint", "tcp://*:5558"},
	} {
		t.Run(c.field+" "+c.ep, func(t *testing.T) {
			body := reg("w", `,"`+c.field+`":"`+c.ep+`"`)
			if c.field == "kv_replay_endpoint" {
				body = reg("w", `,"kv_events_endpoint":"tcp://10.0.0.5:5557","`+c.field+`":"`+c.ep+`"`)
			}
			code, _, out := h.do("POST", "/v1/workers", body, nil)
			if code != http.StatusUnprocessableEntity || !strings.Contains(string(out), `"field":"`+c.field+`"`) ||
				!strings.Contains(string(out), "reachable") {
				t.Fatalf("got %d %s, want 422 on %s naming the reachable address to give", code, out, c.field)
			}
		})
	}
	for i, ep := range []string{"tcp://10.0.0.5:5557", "tcp://decode-1.engines:5557", "tcp://[fd00::5]:5557", "ipc:///tmp/kv", "inproc://kv"} {
		t.Run("accepted "+ep, func(t *testing.T) {
			h.mustDo(http.StatusAccepted, "POST", "/v1/workers", reg("ok"+string(rune('a'+i)), `,"kv_events_endpoint":"`+ep+`"`), nil)
		})
	}
}
