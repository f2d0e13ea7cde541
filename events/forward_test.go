package events_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

func goodForward() *pb.ForwardedEvent {
	ms, toks := 182.5, uint64(311)
	return &pb.ForwardedEvent{RequestId: "r-123", Kind: pb.OutcomeEvent_KIND_COMPLETED, TtftMs: &ms, ItlMsMean: &ms,
		OutputTokens: &toks, EventTimeUnixNano: 1764400009000000000, ForwardedBy: "router-1"}
}

// forwardRecord frames v as a producer that skips validation would.
func forwardRecord(v []byte, logTime time.Time) *kgo.Record {
	return &kgo.Record{Topic: names.Physical(events.TopicForwards), Key: []byte("r-123"), Value: v, Timestamp: logTime,
		Headers: []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte(events.SchemaOf(events.TopicForwards))}}}
}

// A forwarded lifecycle event is read by every replica of snapshots, from
// a topic any client of the brokers can append to: each value a client of
// POST /v1/requests/{id}/events could not have sent is refused on write
// and on read, with a fixed reason, and the bounds themselves are taken.
func TestForwardedEventHostile(t *testing.T) {
	edit := func(f func(*pb.ForwardedEvent)) *pb.ForwardedEvent {
		m := goodForward()
		f(m)
		return m
	}
	num := func(v float64) *float64 { return &v }
	toks := func(v uint64) *uint64 { return &v }
	logTime := time.Now()
	cases := []struct {
		name   string
		msg    *pb.ForwardedEvent
		reason string
		field  string
	}{
		{"no request id", edit(func(m *pb.ForwardedEvent) { m.RequestId = "" }), events.ReasonMissingID, "request_id"},
		{"long request id", edit(func(m *pb.ForwardedEvent) { m.RequestId = strings.Repeat("r", events.MaxIDLen+1) }), events.ReasonFieldTooLong, "request_id"},
		{"no forwarder", edit(func(m *pb.ForwardedEvent) { m.ForwardedBy = "" }), events.ReasonMissingID, "forwarded_by"},
		{"long forwarder", edit(func(m *pb.ForwardedEvent) { m.ForwardedBy = strings.Repeat("f", events.MaxNameLen+1) }), events.ReasonFieldTooLong, "forwarded_by"},
		{"kind unspecified", edit(func(m *pb.ForwardedEvent) { m.Kind = pb.OutcomeEvent_KIND_UNSPECIFIED }), events.ReasonKind, "kind"},
		{"kind unknown to this build", edit(func(m *pb.ForwardedEvent) { m.Kind = 99 }), events.ReasonKind, "kind"},
		{"negative ttft", edit(func(m *pb.ForwardedEvent) { m.TtftMs = num(-0.5) }), events.ReasonNumber, "ttft_ms"},
		{"NaN ttft", edit(func(m *pb.ForwardedEvent) { m.TtftMs = num(math.NaN()) }), events.ReasonNumber, "ttft_ms"},
		{"infinite itl", edit(func(m *pb.ForwardedEvent) { m.ItlMsMean = num(math.Inf(1)) }), events.ReasonNumber, "itl_ms_mean"},
		{"itl over the bound", edit(func(m *pb.ForwardedEvent) { m.ItlMsMean = num(events.MaxLifecycleMs * 1.5) }), events.ReasonNumber, "itl_ms_mean"},
		{"output tokens over the bound", edit(func(m *pb.ForwardedEvent) { m.OutputTokens = toks(events.MaxOutputTokens + 1) }), events.ReasonNumber, "output_tokens"},
		{"output tokens 2^64-1", edit(func(m *pb.ForwardedEvent) { m.OutputTokens = toks(math.MaxUint64) }), events.ReasonNumber, "output_tokens"},
		{"negative event time", edit(func(m *pb.ForwardedEvent) { m.EventTimeUnixNano = -1 }), events.ReasonNegativeTime, "event_time"},
		{"event time past the log time", edit(func(m *pb.ForwardedEvent) { m.EventTimeUnixNano = logTime.Add(2 * events.MaxEventSkew).UnixNano() }), events.ReasonFutureTime, "event_time"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := events.ValidateAt(c.msg, logTime)
			var ve *events.ValidationError
			if !errors.As(err, &ve) || ve.Reason != c.reason || ve.Field != c.field {
				t.Fatalf("ValidateAt = %v, want reason %q on %q", err, c.reason, c.field)
			}
			if _, err := events.NewRecord(names, []byte(c.msg.GetRequestId()), c.msg); err == nil {
				t.Fatal("NewRecord wrote it")
			}
			v, err := proto.Marshal(c.msg)
			if err != nil {
				t.Fatal(err)
			}
			env, err := events.Decode(names, forwardRecord(v, logTime))
			if env != nil || !errors.Is(err, events.ErrInvalid) || events.Reason(err) != c.reason {
				t.Fatalf("Decode = %v (reason %q), want invalid with reason %q", err, events.Reason(err), c.reason)
			}
		})
	}

	// The bounds are inclusive, and every measurement is optional.
	for _, m := range []*pb.ForwardedEvent{
		edit(func(m *pb.ForwardedEvent) {
			m.TtftMs, m.ItlMsMean, m.OutputTokens = num(events.MaxLifecycleMs), num(0), toks(events.MaxOutputTokens)
		}),
		edit(func(m *pb.ForwardedEvent) {
			m.Kind, m.TtftMs, m.ItlMsMean, m.OutputTokens, m.EventTimeUnixNano = pb.OutcomeEvent_KIND_CANCELLED, nil, nil, nil, 0
		}),
		edit(func(m *pb.ForwardedEvent) { m.Kind = pb.OutcomeEvent_KIND_PREFILL_DONE }),
	} {
		v, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		env, err := events.Decode(names, forwardRecord(v, logTime))
		if err != nil || !proto.Equal(env.Message, m) {
			t.Fatalf("a valid forward %v: %v", m, err)
		}
	}

	// Bytes that are no ForwardedEvent: malformed, never a panic.
	for _, v := range [][]byte{{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, {0x12}, {0xff}} {
		if _, err := events.Decode(names, forwardRecord(v, logTime)); !errors.Is(err, events.ErrMalformed) {
			t.Fatalf("Decode of % x = %v, want malformed", v, err)
		}
	}
	// A forward is the value of no other topic, nor another topic's of it.
	v, _ := proto.Marshal(goodForward())
	r := forwardRecord(v, logTime)
	r.Topic = names.Physical(events.TopicOutcomes)
	if _, err := events.Decode(names, r); !errors.Is(err, events.ErrWrongTopic) {
		t.Fatalf("a forward on outcomes: %v, want wrong topic", err)
	}
}
