package ingest

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// feed hands the live seqs to s in order.
func feed(t *testing.T, s *source, seqs []uint64) {
	t.Helper()
	for _, seq := range seqs {
		if err := s.handle(context.Background(), live(t, seq)); err != nil {
			t.Fatal(err)
		}
	}
}

// A replay that returned every missing seq is complete, whether or not a
// reset preceded it: the result says what the replay did, and the reset
// has its own counter.
func TestSourceReplayResultAfterReset(t *testing.T) {
	label := events.WorkerRank("w1", 0)
	t.Run("first contact", func(t *testing.T) {
		s := newTestSource("tcp://r", &fakeReplayer{buf: bufOf(t, 0, 1, 2, 3)}, &memSink{})
		feed(t, s, []uint64{3, 4})
		replays(t, s, label, map[string]float64{"complete": 1, "incomplete": 0})
	})
	t.Run("restart", func(t *testing.T) {
		rp := &fakeReplayer{}
		s := newTestSource("tcp://r", rp, &memSink{})
		feed(t, s, []uint64{0, 1, 2})
		rp.buf = bufOf(t, 0, 1) // the new process's buffer
		feed(t, s, []uint64{2})
		replays(t, s, label, map[string]float64{"complete": 1, "incomplete": 0})
	})
	t.Run("buffer lost the start", func(t *testing.T) {
		s := newTestSource("tcp://r", &fakeReplayer{buf: bufOf(t, 2, 3)}, &memSink{})
		feed(t, s, []uint64{3})
		replays(t, s, label, map[string]float64{"complete": 0, "incomplete": 1})
	})
}

func replays(t *testing.T, s *source, label string, want map[string]float64) {
	t.Helper()
	for result, n := range want {
		if got := testutil.ToFloat64(s.deps.metrics.Replays.WithLabelValues(label, result)); got != n {
			t.Errorf("replays_total{result=%q} = %v, want %v", result, got, n)
		}
	}
}

// Reading a source for the first time loses nothing when the engine's
// history is complete (it starts at seq 0, or replay returns all of it):
// the reset that drops what the state held before is not a gap.
func TestSourceFirstContactIsNoLoss(t *testing.T) {
	label := events.WorkerRank("w1", 0)
	cases := []struct {
		name          string
		replay        string
		buf           []Message
		lives         []uint64
		first, losses float64
	}{
		{"seq 0", "tcp://r", nil, []uint64{0, 1}, 1, 0},
		{"seq 0, no replay socket", "", nil, []uint64{0, 1}, 1, 0},
		{"history replayed", "tcp://r", bufOf(t, 0, 1, 2), []uint64{2}, 1, 0},
		{"history gone, no replay socket", "", nil, []uint64{2}, 1, 1},
		{"history partly gone", "tcp://r", bufOf(t, 1, 2), []uint64{2}, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sink := &memSink{}
			s := newTestSource(c.replay, &fakeReplayer{buf: c.buf}, sink)
			feed(t, s, c.lives)
			m := s.deps.metrics
			if got := testutil.ToFloat64(m.Resets.WithLabelValues(label, "unrecoverable_gap")); got != c.losses {
				t.Errorf("source_resets_total{reason=unrecoverable_gap} = %v, want %v", got, c.losses)
			}
			if got := testutil.ToFloat64(m.Resets.WithLabelValues(label, "first_contact")); got != c.first {
				t.Errorf("source_resets_total{reason=first_contact} = %v, want %v", got, c.first)
			}
			gaps := 0
			for _, r := range sink.kv() {
				if r.GetEvents()[0].GetSourceReset().GetReason() == pb.SourceReset_REASON_UNRECOVERABLE_GAP {
					gaps++
				}
			}
			if float64(gaps) != c.losses {
				t.Errorf("%d records say unrecoverable gap, want %v: %v", gaps, c.losses, summary(sink.kv()))
			}
		})
	}
}
