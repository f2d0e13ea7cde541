package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// memSink collects records in memory, validating them like Kafka framing
// does.
type memSink struct {
	mu   sync.Mutex
	recs []proto.Message
	keys []string
	fail error
}

func (m *memSink) Produce(_ context.Context, key []byte, msg proto.Message) error {
	if _, err := events.NewRecord(events.Names{}, key, msg); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.recs = append(m.recs, proto.Clone(msg))
	m.keys = append(m.keys, string(key))
	return nil
}

func (m *memSink) kv() []*pb.KvEventRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*pb.KvEventRecord
	for _, r := range m.recs {
		if kv, ok := r.(*pb.KvEventRecord); ok {
			out = append(out, kv)
		}
	}
	return out
}

// fakeReplayer serves a fixed buffer of (seq, payload) like an engine.
type fakeReplayer struct {
	buf      []Message
	err      error
	requests []uint64
}

func (f *fakeReplayer) Replay(_ context.Context, _ string, from uint64, _ time.Duration, fn func(Message) bool) error {
	f.requests = append(f.requests, from)
	for _, m := range f.buf {
		if m.Seq >= from && !fn(m) {
			return nil
		}
	}
	return f.err
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// clearedPayload is a batch whose single event carries its seq as the hash
// of a BlockRemoved, so tests can tell which batch a record came from.
func seqPayload(t testing.TB, seq uint64) []byte {
	return mp(t, []any{1.0, []any{[]any{"BlockRemoved", []any{seq + 1000}}}, 0})
}

func live(t testing.TB, seq uint64) inbound {
	return decodeInbound(received{msg: Message{Topic: []byte("kv"), Seq: seq, Payload: seqPayload(t, seq)}, at: time.Now()}, pb.Engine_ENGINE_VLLM)
}

// summary renders records as "R<reason>" for resets and the seq otherwise.
func summary(recs []*pb.KvEventRecord) []string {
	var out []string
	for _, r := range recs {
		if sr := r.GetEvents()[0].GetSourceReset(); sr != nil {
			out = append(out, fmt.Sprintf("R%d", sr.GetReason()))
			continue
		}
		out = append(out, fmt.Sprintf("%d", r.GetSource().GetSeq()))
	}
	return out
}

func newTestSource(replay string, r Replayer, sink Sink) *source {
	return newSource(sourceSpec{Worker: "w1", Engine: pb.Engine_ENGINE_VLLM, Endpoint: "tcp://e:1", Replay: replay},
		sourceDeps{sink: sink, replayer: r, metrics: NewMetrics(nil), log: quietLog(), ingestID: "i", replayTimeout: time.Second})
}

func bufOf(t testing.TB, seqs ...uint64) []Message {
	var out []Message
	for _, s := range seqs {
		out = append(out, Message{Seq: s, Payload: seqPayload(t, s)})
	}
	return out
}

func TestSourceSequencing(t *testing.T) {
	// F: first contact (enum 4); R1: unrecoverable gap (enum 2); R2:
	// sequence restart (enum 1).
	const F, R1, R2 = "R4", "R2", "R1"
	cases := []struct {
		name   string
		replay string
		buf    []Message
		err    error
		lives  []uint64
		want   []string
	}{
		{"first contact, full history replayed", "tcp://r", bufOf(t, 0, 1, 2, 3), nil, []uint64{3, 4},
			[]string{F, "0", "1", "2", "3", "4"}},
		{"first contact at 0 needs no replay", "tcp://r", nil, nil, []uint64{0, 1}, []string{F, "0", "1"}},
		{"gap filled", "tcp://r", bufOf(t, 0, 1, 2, 3, 4, 5), nil, []uint64{0, 1, 4, 5},
			[]string{F, "0", "1", "2", "3", "4", "5"}},
		{"gap partly gone from the buffer", "tcp://r", bufOf(t, 3, 4, 5), nil, []uint64{0, 1, 4},
			[]string{F, "0", "1", R1, "3", "4"}},
		{"gap, replay fails", "tcp://r", nil, errors.New("dial"), []uint64{0, 1, 4},
			[]string{F, "0", "1", R1, "4"}},
		{"gap, no replay endpoint", "", nil, nil, []uint64{0, 1, 4}, []string{F, "0", "1", R1, "4"}},
		{"restart", "tcp://r", bufOf(t, 0, 1), nil, []uint64{5, 6, 2},
			[]string{F, "0", "1", "2", "3", "4", "5", "6", R2, "0", "1", "2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sink := &memSink{}
			rp := &fakeReplayer{buf: c.buf, err: c.err}
			if c.name == "restart" {
				// Before the restart the engine buffer held 0..4 of the old
				// process; after, 0..1 of the new one.
				rp.buf = bufOf(t, 0, 1, 2, 3, 4)
			}
			s := newTestSource(c.replay, rp, sink)
			for _, seq := range c.lives {
				if c.name == "restart" && seq == 2 {
					rp.buf = bufOf(t, 0, 1)
				}
				if err := s.handle(context.Background(), live(t, seq)); err != nil {
					t.Fatal(err)
				}
			}
			got := summary(sink.kv())
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("records %v, want %v (replay requests %v)", got, c.want, rp.requests)
			}
			// Every non-reset record carries the batch of its seq.
			for _, r := range sink.kv() {
				if rm := r.GetEvents()[0].GetRemoved(); rm != nil && rm.GetBlockHashes()[0] != r.GetSource().GetSeq()+1000 {
					t.Errorf("record seq %d carries the batch of %d", r.GetSource().GetSeq(), rm.GetBlockHashes()[0]-1000)
				}
				if r.GetRaw().GetFormat() != pb.RawFormat_RAW_FORMAT_VLLM_MSGPACK && r.GetEvents()[0].GetSourceReset() == nil {
					t.Errorf("raw format %v", r.GetRaw().GetFormat())
				}
			}
		})
	}
}

func TestSourceEpochsAndUndecodable(t *testing.T) {
	sink := &memSink{}
	s := newTestSource("", &fakeReplayer{}, sink)
	ctx := context.Background()
	for _, in := range []inbound{
		live(t, 0),
		decodeInbound(received{msg: Message{Seq: 1, Payload: []byte{0xc1}}}, pb.Engine_ENGINE_VLLM),
		live(t, 2),
	} {
		if err := s.handle(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	recs := sink.kv()
	if len(recs) != 4 {
		t.Fatalf("%d records: %v", len(recs), summary(recs))
	}
	bad := recs[2]
	if bad.GetEvents()[0].GetSourceReset() == nil || string(bad.GetRaw().GetPayload()) != "\xc1" || bad.GetSource().GetSeq() != 1 {
		t.Errorf("undecodable batch record: %v", bad)
	}
	if recs[1].GetSource().GetEpoch() != 1 || recs[3].GetSource().GetEpoch() != 2 {
		t.Errorf("epochs %d, %d; want 1, 2", recs[1].GetSource().GetEpoch(), recs[3].GetSource().GetEpoch())
	}
	for _, k := range sink.keys {
		if k != "w1" {
			t.Errorf("key %q", k)
		}
	}
}

func TestSourceSinkFailureStops(t *testing.T) {
	sink := &memSink{fail: errors.New("kafka gone")}
	s := newTestSource("", &fakeReplayer{}, sink)
	if err := s.handle(context.Background(), live(t, 0)); err == nil {
		t.Fatal("a sink failure must stop the source")
	}
}

// TestSourceRefusesBatchesNoReplicaWouldApply: a batch that decodes but
// breaks a bound every replica applies (an event time an hour ahead of
// ingest's clock, a dp rank past events.MaxDPSize) is refused like an
// undecodable one: counted, and replaced on the log by a reset of the
// source, raw bytes kept. Ingest goes on; one engine with a fast clock must
// not stop it.
func TestSourceRefusesBatchesNoReplicaWouldApply(t *testing.T) {
	ahead := float64(time.Now().Add(time.Hour).Unix())
	for name, payload := range map[string][]byte{
		"event time an hour ahead": mp(t, []any{ahead, []any{[]any{"BlockRemoved", []any{7}}}, 0}),
		"dp rank past the ceiling": mp(t, []any{1.0, []any{[]any{"BlockRemoved", []any{7}}}, events.MaxDPSize + 5}),
	} {
		t.Run(name, func(t *testing.T) {
			sink := &memSink{}
			s := newTestSource("", &fakeReplayer{}, sink)
			ctx := context.Background()
			bad := decodeInbound(received{msg: Message{Topic: []byte("kv"), Seq: 1, Payload: payload}, at: time.Now()}, pb.Engine_ENGINE_VLLM)
			for _, in := range []inbound{live(t, 0), bad, live(t, 2)} {
				if err := s.handle(ctx, in); err != nil {
					t.Fatalf("ingest stopped: %v", err)
				}
			}
			recs := sink.kv()
			if got := summary(recs); len(recs) != 4 || got[2] != "R"+fmt.Sprint(int32(pb.SourceReset_REASON_UNRECOVERABLE_GAP)) {
				t.Fatalf("records %v: want the batch replaced by a reset", got)
			}
			if r := recs[2]; string(r.GetRaw().GetPayload()) != string(payload) || r.GetWorker().GetDpRank() != 0 {
				t.Errorf("the reset keeps the raw bytes and names the source's own rank: %v", r)
			}
			if n := testutil.ToFloat64(s.deps.metrics.DecodeErrors.WithLabelValues(ReasonInvalid)); n != 1 {
				t.Errorf("decode errors {reason=%s} = %v, want 1", ReasonInvalid, n)
			}
		})
	}
}
