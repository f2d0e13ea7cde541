package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestRestartedReplicaNotReadyWhileReplaying: a replica whose state has not
// yet applied the log as it stood when the replica started knows nothing
// of the fleet the log registers. It must not answer as if there were no
// workers (503 no_workers, 422 unknown_model): /v1/route and /readyz answer
// 503 not_ready with Retry-After until the replay has reached that end,
// and route normally after.
func TestRestartedReplicaNotReadyWhileReplaying(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h1 := newHarness(t, brokers, harnessOpt{})
	h1.mustDo(http.StatusAccepted, "POST", "/v1/workers",
		`{"worker_id":"decode-1","pool":"decode","model":"m","block_size":16}`, nil)
	waitWorkers(t, h1, 1)

	hold := make(chan struct{})
	h2 := newHarness(t, brokers, harnessOpt{share: h1, hold: hold})
	route := func(model string) (int, http.Header, []byte) {
		return h2.do("POST", "/v1/route", map[string]any{"model": model, "token_ids": tokens(40, 0)}, nil)
	}
	for _, model := range []string{"", "m"} {
		code, hdr, body := route(model)
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"not_ready"`) || hdr.Get("Retry-After") == "" {
			t.Fatalf("route (model %q) while replaying: %d %s (Retry-After %q), want 503 not_ready with Retry-After", model, code, body, hdr.Get("Retry-After"))
		}
	}
	if code, hdr, body := h2.do("GET", "/readyz", nil, nil); code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Fatalf("readyz while replaying: %d %s", code, body)
	}

	close(hold)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, body := route("")
		if code == http.StatusOK {
			break
		}
		if !strings.Contains(string(body), `"code":"not_ready"`) || time.Now().After(deadline) {
			t.Fatalf("route after the replay was let go: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	h2.mustDo(http.StatusOK, "GET", "/readyz", nil, nil)
}
