package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

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

// TestRegisterHTTPURL: http_url is the engine's OpenAI base URL the door
// calls. A bind address, a URL ending in /v1, a non-http scheme or one with
// user info is refused on the field; a reachable base URL is accepted and
// shown by GET /v1/workers.
func TestRegisterHTTPURL(t *testing.T) {
	h := newHarness(t, kafkatest.Fake(t), harnessOpt{})
	reg := func(id, url string) string {
		return `{"worker_id":"` + id + `","pool":"decode","model":"m","block_size":16,"http_url":"` + url + `"}`
	}
	for _, u := range []string{"http://0.0.0.0:8000", "http://[::]:8000", "http://:8000", "http://10.0.0.5:8000/v1",
		"http://10.0.0.5:8000/v1/", "tcp://10.0.0.5:8000", "http://u:p@10.0.0.5:8000", "http://10.0.0.5:8000?x=1", "10.0.0.5:8000"} {
		t.Run("refused "+u, func(t *testing.T) {
			code, _, out := h.do("POST", "/v1/workers", reg("w", u), nil)
			if code != http.StatusUnprocessableEntity || !strings.Contains(string(out), `"field":"http_url"`) {
				t.Fatalf("got %d %s, want 422 on http_url", code, out)
			}
		})
	}
	h.mustDo(http.StatusAccepted, "POST", "/v1/workers", reg("ok", "http://10.0.0.5:8000"), nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, out := h.do("GET", "/v1/workers", nil, nil)
		if strings.Contains(string(out), `"http_url":"http://10.0.0.5:8000"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/workers never showed the http_url: %s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
