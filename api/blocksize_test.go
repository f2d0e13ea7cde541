package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestWorkersShowBlockSizeMismatch: a worker registered with block_size 16
// whose engine publishes page-size-1 events (SGLang's default) shows its
// cached blocks and no missing KV events, so without this flag nothing
// says that its overlap is always 0. GET /v1/workers flags it with a note
// and the block size the events carry, and the gauge counts it (present
// at 0 before).
func TestWorkersShowBlockSizeMismatch(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{})
	gauge := func() float64 {
		t.Helper()
		n, err := testutil.GatherAndCount(h.reg, "pdrouter_kv_block_size_mismatch_workers")
		if err != nil || n != 1 {
			t.Fatalf("pdrouter_kv_block_size_mismatch_workers: %d series, %v", n, err)
		}
		mfs, _ := h.reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "pdrouter_kv_block_size_mismatch_workers" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	if g := gauge(); g != 0 {
		t.Fatalf("gauge at start = %v, want 0", g)
	}
	for _, w := range []map[string]any{
		{"worker_id": "decode-1", "pool": "decode", "model": "m", "block_size": 16, "engine": "sglang"},
		{"worker_id": "decode-2", "pool": "decode", "model": "m", "block_size": 16},
	} {
		h.mustDo(http.StatusAccepted, "POST", "/v1/workers", w, nil)
	}
	post := func(worker string, blockSize, blocks int) {
		hashes := make([]any, blocks)
		for i := range hashes {
			hashes[i] = i + 1
		}
		h.mustDo(http.StatusAccepted, "POST", "/v1/events/kv", map[string]any{
			"worker_id": worker, "ts": 1764400000.25,
			"events": []map[string]any{{"type": "stored", "block_hashes": hashes, "parent_block_hash": nil,
				"token_ids": tokens(blockSize*blocks, 0), "block_size": blockSize}},
		}, nil)
	}
	post("decode-1", 1, 108)
	post("decode-2", 16, 2)

	type row struct {
		WorkerID            string `json:"worker_id"`
		CachedBlocks        int64  `json:"cached_blocks"`
		KVEventsMissing     bool   `json:"kv_events_missing"`
		KVEventsBlockSize   int    `json:"kv_events_block_size"`
		KVBlockSizeMismatch bool   `json:"kv_block_size_mismatch"`
		KVBlockSizeNote     string `json:"kv_block_size_note"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got map[string]row
	for {
		var ws struct {
			Workers []row `json:"workers"`
		}
		h.mustDo(http.StatusOK, "GET", "/v1/workers", nil, &ws)
		got = map[string]row{}
		for _, w := range ws.Workers {
			got[w.WorkerID] = w
		}
		if got["decode-1"].CachedBlocks == 108 && got["decode-2"].CachedBlocks == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("events not applied: %+v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d1, d2 := got["decode-1"], got["decode-2"]
	if d1.KVEventsMissing || !d1.KVBlockSizeMismatch || d1.KVEventsBlockSize != 1 ||
		!strings.Contains(d1.KVBlockSizeNote, "registered with block_size 16 but its engine publishes KV events with block_size 1") {
		t.Fatalf("decode-1: %+v", d1)
	}
	if d2.KVBlockSizeMismatch || d2.KVEventsBlockSize != 16 || d2.KVBlockSizeNote != "" {
		t.Fatalf("decode-2: %+v", d2)
	}
	if g := gauge(); g != 1 {
		t.Fatalf("gauge = %v, want 1", g)
	}
}
