package statestore

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// The block size mismatch is logged once when a worker enters the state,
// not on every BlockStored; leaving and entering again logs again, and a
// new process logs every flagged worker once at Open.
func TestKvBlockSizeMismatchLogsOncePerTransition(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	h := newHarnessWith(t, 2, Options{
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 16, 0))
	count := func() (warn, info int) {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(buf.String(), "KV block size mismatch"), strings.Count(buf.String(), "no longer mismatched")
	}
	store := func(at int64, eng uint64, bs int) {
		h.put("d1", kvRec("d1", 0, at*1e9, stored(pb.Tier_TIER_DEVICE, nil, []uint64{eng}, tokens("X", 0, 0, bs), bs)))
	}
	for i := range int64(20) {
		store(100+i, uint64(i+1), 1)
	}
	if w, i := count(); w != 1 || i != 0 {
		t.Fatalf("after 20 BlockStored of block size 1: %d warnings, %d notes; want 1, 0\n%s", w, i, buf.String())
	}
	if !strings.Contains(buf.String(), "registered_block_size=16 events_block_size=1") {
		t.Fatalf("the warning names both block sizes:\n%s", buf.String())
	}
	store(200, 100, 16)
	if w, i := count(); w != 1 || i != 1 {
		t.Fatalf("after a BlockStored of block size 16: %d warnings, %d notes; want 1, 1", w, i)
	}
	store(201, 101, 1)
	store(202, 102, 1)
	if w, _ := count(); w != 2 {
		t.Fatalf("after block size 1 again: %d warnings, want 2", w)
	}
	h.reopen()
	if w, _ := count(); w != 3 {
		t.Fatalf("after reopen: %d warnings, want 3", w)
	}
}
