package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// TestSourceLabelsBounded: the data-parallel rank of a batch comes from the
// engine, so one publisher sending a new rank per message must not create a
// metric series per rank: past the cap, sources are counted as "other".
func TestSourceLabelsBounded(t *testing.T) {
	// One worker has at most events.MaxDPSize ranks, so the cap is set
	// below that for the test to pass it.
	const limit = 256
	const ranks = limit + 500
	src := newTestSource("", &fakeReplayer{}, &memSink{})
	src.deps.metrics.SetMaxSourceLabels(limit)
	for seq := range uint64(ranks) {
		p := mp(t, []any{1.0, []any{[]any{"BlockRemoved", []any{seq + 1000}}}, int(seq)})
		in := decodeInbound(received{msg: Message{Topic: []byte("kv"), Seq: seq, Payload: p}, at: time.Now()}, pb.Engine_ENGINE_VLLM)
		if err := src.handle(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
	m := src.deps.metrics
	if n := testutil.CollectAndCount(m.Batches); n > limit+1 {
		t.Errorf("%d source series for batches after %d ranks; want at most %d", n, ranks, limit+1)
	}
	if got := testutil.ToFloat64(m.Batches.WithLabelValues(OtherSource)); got != ranks-limit {
		t.Errorf("batches counted as %q: %v, want %d", OtherSource, got, ranks-limit)
	}
}
