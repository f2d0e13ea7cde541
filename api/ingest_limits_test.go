package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/internal/rejects"
)

// TestIngestLimits: registrations, KV events and load samples that would
// strain or poison every replica are answered 422 with the field at fault,
// before anything is written.
func TestIngestLimits(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{apiOpts: []api.Option{api.WithMaxWorkers(2)}})
	reg := func(id, extra string) string {
		return `{"worker_id":"` + id + `","pool":"decode","model":"m","block_size":16` + extra + `}`
	}
	var o offsets
	h.mustDo(http.StatusAccepted, "POST", "/v1/workers", reg("dp2", `,"dp_size":2`), &o)
	waitWorkers(t, h, 1)
	future := float64(time.Now().Add(time.Hour).Unix())
	long := strings.Repeat("x", 4096)
	cases := []struct {
		name, path, body string
		status           int
		code, field      string
	}{
		{"dp_size 2^32-1", "/v1/workers", reg("w", `,"dp_size":4294967295`), 422, "invalid_value", "dp_size"},
		{"dp_size over the ceiling", "/v1/workers", reg("w", `,"dp_size":1025`), 422, "invalid_value", "dp_size"},
		{"worker id ..", "/v1/workers", reg("..", ""), 422, "invalid_value", "worker_id"},
		{"worker id .", "/v1/workers", reg(".", ""), 422, "invalid_value", "worker_id"},
		{"long kv_events_topic", "/v1/workers", reg("w", `,"kv_events_topic":"`+long+`"`), 422, "invalid_value", "kv_events_topic"},
		{"long metrics_url", "/v1/workers", reg("w", `,"metrics_url":"http://`+long+`"`), 422, "invalid_value", "metrics_url"},
		{"long kv_events_endpoint", "/v1/workers", reg("w", `,"kv_events_endpoint":"tcp://`+long+`"`), 422, "invalid_value", "kv_events_endpoint"},
		{"kv dp_rank beyond dp_size", "/v1/events/kv", `{"worker_id":"dp2","dp_rank":2,"events":[{"type":"cleared"}]}`, 422, "invalid_value", "dp_rank"},
		{"load dp_rank beyond dp_size", "/v1/events/load", `{"worker_id":"dp2","dp_rank":7}`, 422, "invalid_value", "dp_rank"},
		{"load dp_rank 2^32-1, unregistered", "/v1/events/load", `{"worker_id":"ghost","dp_rank":4294967295}`, 422, "invalid_value", "dp_rank"},
		{"load dated an hour ahead", "/v1/events/load", fmt.Sprintf(`{"worker_id":"dp2","ts":%.0f}`, future), 422, "invalid_value", "ts"},
		{"kv for an unregistered worker", "/v1/events/kv", `{"worker_id":"ghost","events":[{"type":"cleared"}]}`, 422, "unknown_worker", "worker_id"},
		{"load for an unregistered worker", "/v1/events/load", `{"worker_id":"ghost"}`, 422, "unknown_worker", "worker_id"},
		{"kv dated an hour ahead", "/v1/events/kv", fmt.Sprintf(`{"worker_id":"dp2","ts":%.0f,"events":[{"type":"cleared"}]}`, future), 422, "invalid_value", "ts"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := h.do("POST", c.path, c.body, nil)
			if code != c.status || !strings.Contains(string(body), `"code":"`+c.code+`"`) || !strings.Contains(string(body), `"field":"`+c.field+`"`) {
				t.Fatalf("got %d %s, want %d code=%s field=%s", code, body, c.status, c.code, c.field)
			}
		})
	}
	// Rank 1 of a dp_size 2 worker is fine.
	h.mustDo(http.StatusAccepted, "POST", "/v1/events/load", `{"worker_id":"dp2","dp_rank":1}`, &o)

	// The worker cap: a second worker fits, a third does not; the first
	// may re-register.
	h.mustDo(http.StatusAccepted, "POST", "/v1/workers", reg("w2", ""), &o)
	waitWorkers(t, h, 2)
	if code, _, body := h.do("POST", "/v1/events/load", `{"worker_id":"w2","dp_rank":1}`, nil); code != 422 || !strings.Contains(string(body), `"field":"dp_rank"`) {
		t.Fatalf("rank 1 of a worker without dp_size: %d %s, want 422 dp_rank", code, body)
	}
	code, _, body := h.do("POST", "/v1/workers", reg("w3", ""), nil)
	if code != 422 || !strings.Contains(string(body), `"code":"too_many_workers"`) {
		t.Fatalf("a third worker with --max-workers 2: %d %s, want 422 too_many_workers", code, body)
	}
	h.mustDo(http.StatusAccepted, "POST", "/v1/workers", reg("dp2", `,"dp_size":2`), &o)
	if n := rejects.For(h.reg).Value(rejects.Registration, "too_many_workers"); n != 1 {
		t.Fatalf("rejected_total{registration,too_many_workers} = %v, want 1", n)
	}
}

// waitWorkers waits until the API lists n distinct worker ids.
func waitWorkers(t *testing.T, h *harness, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ws struct {
			Workers []struct {
				WorkerID string `json:"worker_id"`
			} `json:"workers"`
		}
		h.mustDo(http.StatusOK, "GET", "/v1/workers", nil, &ws)
		ids := map[string]bool{}
		for _, w := range ws.Workers {
			ids[w.WorkerID] = true
		}
		if len(ids) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d workers listed, want %d", len(ids), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIngestWaitsForItsOwnRegistration: events posted right after the
// registration, through the same replica and without an after vector, are
// taken, although the state may not have applied the registration yet.
func TestIngestWaitsForItsOwnRegistration(t *testing.T) {
	h := newHarness(t, kafkatest.Fake(t), harnessOpt{})
	for i := range 20 {
		id := fmt.Sprintf("fresh-%d", i)
		h.mustDo(http.StatusAccepted, "POST", "/v1/workers", `{"worker_id":"`+id+`","pool":"decode","model":"m","block_size":16}`, nil)
		h.mustDo(http.StatusAccepted, "POST", "/v1/events/load", `{"worker_id":"`+id+`","num_requests_running":1}`, nil)
		h.mustDo(http.StatusAccepted, "POST", "/v1/events/kv", `{"worker_id":"`+id+`","events":[{"type":"cleared"}]}`, nil)
	}
}
