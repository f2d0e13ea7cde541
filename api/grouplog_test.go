package api

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestGroupLogAppendsLandWhereReported: concurrent appends on the real
// broker (and kfake) each get back the positions their own records were
// written at, every record is in the log exactly once, and concurrent
// appends did share produce requests: the client sent fewer produce
// requests than there were appends.
func TestGroupLogAppendsLandWhereReported(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		kafkatest.Migrate(t, brokers, prefix)
		names := events.Names{Prefix: prefix}
		reg := prometheus.NewRegistry()
		var produces produceCounter
		cl := kafkatest.Client(t, brokers, append(GroupLogClientOpts(), kgo.WithHooks(&produces))...)
		l := NewGroupLog(cl, names, 64<<20, reg)
		var groups int
		l.onCommit = func(int) { groups++ } // called by the one commit loop at a time
		const clients, each = 16, 25
		type landed struct {
			pos   Position
			value string
		}
		var (
			mu  sync.Mutex
			got []landed
			wg  sync.WaitGroup
		)
		topic := names.Physical(events.TopicOutcomes)
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					recs := []*kgo.Record{
						{Topic: topic, Key: []byte(fmt.Sprintf("w%d", c%5)), Value: []byte(fmt.Sprintf("c%d-%d-a", c, i))},
						{Topic: topic, Key: []byte(fmt.Sprintf("w%d", i%5)), Value: []byte(fmt.Sprintf("c%d-%d-b", c, i))},
					}
					pos, err := l.Append(context.Background(), recs...)
					if err != nil || len(pos) != 2 {
						t.Errorf("append: %v %v", pos, err)
						return
					}
					mu.Lock()
					for j, p := range pos {
						got = append(got, landed{p, string(recs[j].Value)})
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		inLog := map[Position]string{}
		for _, r := range kafkatest.ReadAll(t, brokers, topic) {
			p := Position{Topic: events.TopicOutcomes, Partition: r.Partition, Offset: r.Offset}
			if _, dup := inLog[p]; dup {
				t.Fatalf("two records at %v", p)
			}
			inLog[p] = string(r.Value)
		}
		if len(inLog) != clients*each*2 || len(got) != len(inLog) {
			t.Fatalf("%d records in the log, %d reported; want %d", len(inLog), len(got), clients*each*2)
		}
		for _, g := range got {
			if inLog[g.pos] != g.value {
				t.Fatalf("reported %v for %q, which holds %q", g.pos, g.value, inLog[g.pos])
			}
		}
		if groups >= clients*each {
			t.Fatalf("%d groups for %d concurrent appends: nothing was grouped", groups, clients*each)
		}
		if n := produces.n.Load(); n == 0 || n >= clients*each {
			t.Fatalf("%d produce requests for %d concurrent appends (%d groups): appends were not sent together", n, clients*each, groups)
		}
		// The histogram saw every group, and its sum is every append.
		var m dto.Metric
		if err := l.met.groupAppends.Write(&m); err != nil {
			t.Fatal(err)
		}
		if h := m.GetHistogram(); h.GetSampleCount() != uint64(groups) || h.GetSampleSum() != clients*each {
			t.Fatalf("pdrouter_eventlog_group_appends: %d groups, %v appends; want %d and %d", h.GetSampleCount(), h.GetSampleSum(), groups, clients*each)
		}
		t.Logf("%d appends in %d groups, %d produce requests", clients*each, groups, produces.n.Load())
	})
}

// TestGroupLogBoundsWhatWaits: with the broker unreachable, the first
// append's group never completes; later appends wait up to the byte
// bound, and past it fail at once with ErrLogFull. A waiting append whose
// context ends is withdrawn: it frees its room and is never produced.
func TestGroupLogBoundsWhatWaits(t *testing.T) {
	cl := kafkatest.Client(t, []string{"127.0.0.1:1"}, GroupLogClientOpts()...)
	reg := prometheus.NewRegistry()
	l := NewGroupLog(cl, events.Names{}, 100, reg)
	rec := func(n int) *kgo.Record { return &kgo.Record{Topic: "t", Value: make([]byte, n)} }
	started := make(chan struct{})
	l.onCommit = func(int) { close(started); l.onCommit = nil }

	stuck, cancelStuck := context.WithCancel(context.Background())
	defer cancelStuck()
	go func() { _, _ = l.Append(stuck, rec(10)) }() // taken by a group that cannot finish
	<-started

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := l.Append(ctx, rec(60)); errc <- err }()
	waitFor(t, func() bool { return l.waiting() == 60 })

	if _, err := l.Append(context.Background(), rec(41)); !errors.Is(err, ErrLogFull) {
		t.Fatalf("append past the bound: %v; want ErrLogFull", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn append: %v; want context.Canceled", err)
	}
	if n := l.waiting(); n != 0 || testutil.ToFloat64(l.met.queuedBytes) != 0 {
		t.Fatalf("%d bytes still wait after the withdrawal (gauge %v); want 0", n, testutil.ToFloat64(l.met.queuedBytes))
	}
	if n := testutil.ToFloat64(l.met.full); n != 1 {
		t.Fatalf("pdrouter_eventlog_full_total %v; want 1", n)
	}
	// The room is free again: a 100-byte append waits (and is withdrawn
	// by its deadline) instead of failing at once.
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if _, err := l.Append(short, rec(100)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("append into the freed room: %v; want its deadline", err)
	}
}

// produceCounter counts the produce requests a client writes to brokers.
type produceCounter struct{ n atomic.Int64 }

func (p *produceCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil { // kmsg.Produce
		p.n.Add(1)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGroupLogMergesDeltasOfOneWorker: concurrent appends of load deltas
// for a few workers go out as fewer records than appends, one per worker
// and group, and each append's reported position holds a record that
// decodes, passes every reader's rule and contains its entry.
func TestGroupLogMergesDeltasOfOneWorker(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		kafkatest.Migrate(t, brokers, prefix)
		names := events.Names{Prefix: prefix}
		cl := kafkatest.Client(t, brokers, GroupLogClientOpts()...)
		l := NewGroupLog(cl, names, 64<<20, prometheus.NewRegistry())
		const clients, each = 16, 20
		var (
			mu  sync.Mutex
			at  = map[string]Position{} // decision id → where its delta landed
			wg  sync.WaitGroup
			now = time.Now().UnixNano()
		)
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					id, w := fmt.Sprintf("d-%d-%d", c, i), fmt.Sprintf("w%d", (c+i)%3)
					d := &pb.LoadDelta{WriterId: "router-0", Decisions: []*pb.DecisionDelta{{DecisionId: id, RequestId: "r-" + id,
						DecidedAtUnixNano: now, DecodeWorker: &pb.WorkerRef{WorkerId: w}, BlockSize: 16, PromptTokens: 64, Local: true,
						ActiveHashes: []uint64{uint64(c), uint64(i)}}}}
					r, err := events.NewRecord(names, events.WorkerKey(w), d)
					if err != nil {
						t.Error(err)
						return
					}
					pos, err := l.Append(context.Background(), r)
					if err != nil || len(pos) != 1 {
						t.Errorf("append: %v %v", pos, err)
						return
					}
					mu.Lock()
					at[id] = pos[0]
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		held := map[Position]map[string]bool{}
		recs := kafkatest.ReadAll(t, brokers, names.Physical(events.TopicLoadDeltas))
		for _, r := range recs {
			env, err := events.Decode(names, r)
			if err != nil {
				t.Fatalf("a merged delta does not pass a reader's rules: %v", err)
			}
			ids := map[string]bool{}
			for _, e := range env.Message.(*pb.LoadDelta).GetDecisions() {
				ids[e.GetDecisionId()] = true
			}
			held[Position{Topic: events.TopicLoadDeltas, Partition: r.Partition, Offset: r.Offset}] = ids
		}
		for id, p := range at {
			if !held[p][id] {
				t.Fatalf("decision %s reported at %v, whose record holds %v", id, p, held[p])
			}
		}
		if got := l.DeltaRecords(); got != uint64(len(recs)) {
			t.Fatalf("DeltaRecords = %d, the topic holds %d delta records", got, len(recs))
		}
		if len(recs) >= clients*each {
			t.Fatalf("%d delta records for %d appends of 3 workers: nothing was merged", len(recs), clients*each)
		}
		var m dto.Metric
		if err := l.met.deltaEntries.Write(&m); err != nil {
			t.Fatal(err)
		}
		if h := m.GetHistogram(); h.GetSampleCount() != uint64(len(recs)) || h.GetSampleSum() != clients*each {
			t.Fatalf("pdrouter_load_delta_record_entries: %d records, %v entries; want %d and %d", h.GetSampleCount(), h.GetSampleSum(), len(recs), clients*each)
		}
		t.Logf("%d deltas in %d records", clients*each, len(recs))
	})
}
