package api_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// forwardCount is pdrouter_forwarded_events_total{result} of h.
func forwardCount(t *testing.T, h *harness, result string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "pdrouter_forwarded_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series pdrouter_forwarded_events_total{result=%q}", result)
	return 0
}

// waitForwards waits until h counts want forwards of result, failing past
// it or after 10 s.
func waitForwards(t *testing.T, h *harness, result string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := forwardCount(t, h, result)
		if n == want {
			return
		}
		if n > want || time.Now().After(deadline) {
			t.Fatalf("%s forwards: %v, want %v", result, n, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// flakyLog refuses the next failN appends, then appends to next.
type flakyLog struct {
	next  api.EventLog
	failN atomic.Int32
}

func (l *flakyLog) Append(ctx context.Context, recs ...*kgo.Record) ([]api.Position, error) {
	if l.failN.Add(-1) >= 0 {
		return nil, errors.New("injected: the broker did not take it")
	}
	return l.next.Append(ctx, recs...)
}

// A replica that forwards answers 202 with forwarded and the record's
// offset on forwards, where the event is as posted, keyed by the request
// id, dated by the replica's clock and signed with its id; a forward the
// log does not take is 503 and counted failed.
func TestForwardedEventAnswer(t *testing.T) {
	brokers := kafkatest.Fake(t)
	at := time.Unix(1764400000, 250)
	log := &flakyLog{}
	h := newHarness(t, brokers, harnessOpt{
		apiOpts: []api.Option{api.WithForwardEvents(true), api.WithReplicaID("router-b"), api.WithClock(func() time.Time { return at })},
		log: func(h *harness) api.EventLog {
			log.next = api.NewGroupLog(kafkatest.Client(t, brokers, api.GroupLogClientOpts()...), h.names, 64<<20, nil)
			return log
		},
	})
	var body struct {
		Forwarded bool                        `json:"forwarded"`
		Offsets   map[string]map[string]int64 `json:"offsets"`
	}
	h.mustDo(http.StatusAccepted, "POST", "/v1/requests/peer-req/events", map[string]any{"event": "prefill_done", "ttft_ms": 182.5}, &body)
	if !body.Forwarded || len(body.Offsets) != 1 || len(body.Offsets[string(events.TopicForwards)]) != 1 {
		t.Fatalf("the answer: %+v; want forwarded, with one offset on forwards", body)
	}
	recs := kafkatest.ReadAll(t, brokers, h.names.Physical(events.TopicForwards))
	if len(recs) != 1 {
		t.Fatalf("%d records on forwards, want 1", len(recs))
	}
	env, err := events.Decode(h.names, recs[0])
	if err != nil {
		t.Fatal(err)
	}
	ttft := 182.5
	want := &pb.ForwardedEvent{RequestId: "peer-req", Kind: pb.OutcomeEvent_KIND_PREFILL_DONE, TtftMs: &ttft,
		EventTimeUnixNano: at.UnixNano(), ForwardedBy: "router-b"}
	for p, off := range body.Offsets[string(events.TopicForwards)] {
		if p != strconv.Itoa(int(recs[0].Partition)) || off != recs[0].Offset {
			t.Errorf("answered %s:%d, the record is at %d:%d", p, off, recs[0].Partition, recs[0].Offset)
		}
	}
	if string(recs[0].Key) != "peer-req" || !proto.Equal(env.Message, want) {
		t.Fatalf("the forward: key %q, %v; want key peer-req, %v", recs[0].Key, env.Message, want)
	}
	if n := forwardCount(t, h, "sent"); n != 1 {
		t.Fatalf("sent %v, want 1", n)
	}

	log.failN.Store(1)
	code, _, raw := h.do("POST", "/v1/requests/peer-req/events", map[string]any{"event": "completed"}, nil)
	if code != http.StatusServiceUnavailable || forwardCount(t, h, "failed") != 1 || forwardCount(t, h, "sent") != 1 {
		t.Fatalf("a forward the log refused: %d %s, failed %v, sent %v", code, raw, forwardCount(t, h, "failed"), forwardCount(t, h, "sent"))
	}
}

// The forward reader never stops at a record: hostile ones are counted
// invalid and skipped, an unknown request's is not_mine, and a valid one of
// a request this replica decided frees its accounting, retried while the
// log refuses it. It commits what it handled: a reader of the same group
// after it reads only what came since.
func TestForwardReader(t *testing.T) {
	brokers := kafkatest.Fake(t)
	log := &flakyLog{}
	h := newHarness(t, brokers, harnessOpt{
		apiOpts: []api.Option{api.WithForwardEvents(true), api.WithReplicaID("router-a")},
		log: func(h *harness) api.EventLog {
			log.next = api.NewGroupLog(kafkatest.Client(t, brokers, api.GroupLogClientOpts()...), h.names, 64<<20, nil)
			return log
		},
	})
	after := fleet(h)
	var r routeResp
	h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": "mine", "token_ids": tokens(160, 0), "after": after}, &r)
	if a := activeOn(t, h, r.DecodeWorker); a != 10 {
		t.Fatalf("active decode blocks after routing 160 tokens: %d, want 10", a)
	}

	topic := h.names.Physical(events.TopicForwards)
	header := func(schema string) []kgo.RecordHeader {
		return []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte(schema)}}
	}
	fwd := events.SchemaOf(events.TopicForwards)
	valid := func(id string, kind pb.OutcomeEvent_Kind) *kgo.Record {
		rec, err := events.NewRecord(h.names, []byte(id), &pb.ForwardedEvent{RequestId: id, Kind: kind,
			EventTimeUnixNano: time.Now().UnixNano(), ForwardedBy: "router-b"})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	kind99, _ := proto.Marshal(&pb.ForwardedEvent{RequestId: "mine", Kind: 99, ForwardedBy: "router-b"})
	produce := func(recs ...*kgo.Record) {
		t.Helper()
		for _, rec := range recs {
			rec.Topic = topic
		}
		if err := kafkatest.Client(t, brokers).ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(
		&kgo.Record{Key: []byte("mine"), Value: []byte{0x0a, 0xff, 0xff}, Headers: header(fwd)}, // malformed
		&kgo.Record{Key: []byte("mine")}, // a tombstone
		&kgo.Record{Key: []byte("mine"), Value: []byte{0x0a, 0x00}, Headers: header(events.SchemaOf(events.TopicOutcomes))}, // another topic's
		&kgo.Record{Key: []byte("mine"), Value: kind99, Headers: header(fwd)},                                               // a kind no client posts
		valid("nobody", pb.OutcomeEvent_KIND_COMPLETED),
		valid("mine", pb.OutcomeEvent_KIND_COMPLETED),
	)
	log.failN.Store(2) // the first two attempts to append mine's outcome fail

	read := func() (stop func()) {
		// A short fetch wait: kfake held the second reader's first fetch
		// for the whole default wait (5 s) though the record was there.
		cl := kafkatest.Client(t, brokers, append(api.ForwardReaderOpts(h.names, "router-a"), kgo.FetchMaxWait(100*time.Millisecond))...)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.api.RunForwards(ctx, cl) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("RunForwards: %v", err)
			}
			cl.Close()
		}
	}
	stop := read()
	waitForwards(t, h, "applied", 1)
	stop()
	for result, want := range map[string]float64{"invalid": 4, "not_mine": 1, "failed": 2} {
		if n := forwardCount(t, h, result); n != want {
			t.Errorf("%s: %v, want %v", result, n, want)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for activeOn(t, h, r.DecodeWorker) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the forwarded completion did not free mine's blocks: %d", activeOn(t, h, r.DecodeWorker))
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Committed: the group's offsets are the topic's end, and a new reader
	// of the group handles only the record appended since.
	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := adm.FetchOffsets(ctx, api.ForwardGroup(h.names, "router-a"))
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if c, _ := committed.Lookup(topic, o.Partition); c.At != o.Offset {
			t.Errorf("partition %d: committed %d, end %d", o.Partition, c.At, o.Offset)
		}
	})
	produce(valid("mine", pb.OutcomeEvent_KIND_CANCELLED))
	stop = read()
	waitForwards(t, h, "applied", 2)
	stop()
	if inv, nm := forwardCount(t, h, "invalid"), forwardCount(t, h, "not_mine"); inv != 4 || nm != 1 {
		t.Errorf("after a restart of the reader: invalid %v, not_mine %v; want 4 and 1 (nothing read again)", inv, nm)
	}
}
