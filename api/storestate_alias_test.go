package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestWorkersOwnTheirValues: what State.Workers returns stays as it was
// while the store moves on. GET /v1/workers encodes it after the store's
// read lock is released, so a value that pointed into the store's view
// would change under the encoder (a data race) once the view is rebuilt.
func TestWorkersOwnTheirValues(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{})
	fleet(h)
	st := &api.StoreState{Store: h.store}
	total := func(ws []api.WorkerStatus, id string) int64 {
		for _, w := range ws {
			if w.WorkerID == id && w.TotalKVBlocks != nil {
				return *w.TotalKVBlocks
			}
		}
		return -1
	}
	waitTotal := func(want int64) []api.WorkerStatus {
		deadline := time.Now().Add(30 * time.Second)
		for {
			ws := st.Workers()
			if total(ws, "decode-1") == want {
				return ws
			}
			if time.Now().After(deadline) {
				t.Fatalf("decode-1 never showed total_kv_blocks %d", want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	before := waitTotal(1000)
	h.mustDo(http.StatusAccepted, "POST", "/v1/workers", map[string]any{"worker_id": "decode-1", "pool": "decode", "model": "m",
		"block_size": 16, "total_kv_blocks": 500, "engine": "vllm"}, nil)
	waitTotal(500)
	if got := total(before, "decode-1"); got != 1000 {
		t.Fatalf("a status taken before the re-registration now says total_kv_blocks %d, want 1000", got)
	}
}
