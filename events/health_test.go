package events_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
)

const healthSchema = "pdrouter.events.v1.WorkerHealth"

// TestWorkerHealthRecord: a health record goes on the load topic under its
// own schema header, keyed by its worker, and decodes back to itself; the
// load topic's main schema is still LoadSample.
func TestWorkerHealthRecord(t *testing.T) {
	s := eventstest.Side()[0]
	r, err := events.NewRecord(names, s.Key, s.Msg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Topic != "prod.load" || string(r.Headers[0].Value) != healthSchema || string(r.Key) != "decode-1" {
		t.Fatalf("record on %s with header %s key %s", r.Topic, r.Headers[0].Value, r.Key)
	}
	env, err := events.Decode(names, r)
	if err != nil || !proto.Equal(env.Message, s.Msg) || env.Schema != healthSchema {
		t.Fatalf("decode: %v %v", env, err)
	}
	if got := events.SchemaOf(events.TopicLoad); got != "pdrouter.events.v1.LoadSample" {
		t.Fatalf("SchemaOf(load) = %s", got)
	}
	if got := events.SideSchemas(events.TopicLoad); len(got) != 1 || got[0] != healthSchema {
		t.Fatalf("SideSchemas(load) = %v", got)
	}
	// On another topic it is refused as misplaced, not guessed at.
	r.Topic = "prod.workers"
	if _, err := events.Decode(names, r); !errors.Is(err, events.ErrWrongTopic) {
		t.Fatalf("a health record on workers: %v, want wrong_topic", err)
	}
}

func TestWorkerHealthValidation(t *testing.T) {
	ok := func() *pb.WorkerHealth { return proto.Clone(eventstest.Side()[0].Msg).(*pb.WorkerHealth) }
	cases := []struct {
		name   string
		edit   func(*pb.WorkerHealth)
		reason string
	}{
		{"valid", func(*pb.WorkerHealth) {}, ""},
		{"recovered", func(h *pb.WorkerHealth) { h.Healthy, h.Reason = true, pb.HealthReason_HEALTH_REASON_RECOVERED }, ""},
		{"healthy with a failure reason", func(h *pb.WorkerHealth) { h.Healthy = true }, events.ReasonHealth},
		{"unhealthy with recovered", func(h *pb.WorkerHealth) { h.Reason = pb.HealthReason_HEALTH_REASON_RECOVERED }, events.ReasonHealth},
		{"no reason", func(h *pb.WorkerHealth) { h.Reason = 0 }, events.ReasonHealth},
		{"unknown reason", func(h *pb.WorkerHealth) { h.Reason = 42 }, events.ReasonHealth},
		{"no source", func(h *pb.WorkerHealth) { h.Source = 0 }, events.ReasonHealth},
		{"unknown source", func(h *pb.WorkerHealth) { h.Source = -3 }, events.ReasonHealth},
		{"no worker", func(h *pb.WorkerHealth) { h.WorkerId = "" }, events.ReasonWorkerID},
		{"worker with a slash", func(h *pb.WorkerHealth) { h.WorkerId = "a/b" }, events.ReasonWorkerID},
		{"long detail", func(h *pb.WorkerHealth) { h.Detail = strings.Repeat("d", events.MaxHealthDetailLen+1) }, events.ReasonFieldTooLong},
		{"long observer", func(h *pb.WorkerHealth) { h.Observer = strings.Repeat("o", events.MaxHealthDetailLen+1) }, events.ReasonFieldTooLong},
		{"negative time", func(h *pb.WorkerHealth) { h.ObservedAtUnixNano = -1 }, events.ReasonNegativeTime},
		{"future time", func(h *pb.WorkerHealth) { h.ObservedAtUnixNano = time.Now().Add(time.Hour).UnixNano() }, events.ReasonFutureTime},
	}
	for _, c := range cases {
		h := ok()
		c.edit(h)
		err := events.ValidateAt(h, time.Now())
		if got := events.ValidationReason(err); got != c.reason {
			t.Errorf("%s: reason %q (%v), want %q", c.name, got, err, c.reason)
		}
	}
}

// FuzzWorkerHealth: any value under the health schema on the load topic
// decodes to a valid record or to a DecodeError, never a panic; an
// accepted one round-trips byte for byte.
func FuzzWorkerHealth(f *testing.F) {
	for _, s := range eventstest.Side() {
		v, _ := events.Marshal(s.Msg)
		f.Add(v)
	}
	f.Add([]byte{0x10, 0x01, 0x18, 0x04, 0x20, 0x03, 0x0a, 0x01, 'w'})
	f.Add([]byte{0x18, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, value []byte) {
		r := &kgo.Record{Topic: names.Physical(events.TopicLoad), Key: []byte("k"), Value: value, Timestamp: fuzzLogTime,
			Headers: []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte(healthSchema)}}}
		env, err := events.Decode(names, r)
		if err != nil {
			var de *events.DecodeError
			if !errors.As(err, &de) || env != nil {
				t.Fatalf("error %T %v with envelope %v", err, err, env)
			}
			return
		}
		h, ok := env.Message.(*pb.WorkerHealth)
		if !ok {
			t.Fatalf("decoded %T", env.Message)
		}
		if h.GetHealthy() != (h.GetReason() == pb.HealthReason_HEALTH_REASON_RECOVERED) || len(h.GetDetail()) > events.MaxHealthDetailLen {
			t.Fatalf("accepted an invalid record: %v", h)
		}
		v, err := events.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		again, err := events.Decode(names, &kgo.Record{Topic: r.Topic, Key: r.Key, Value: v, Timestamp: fuzzLogTime, Headers: r.Headers})
		if err != nil || !proto.Equal(again.Message, h) {
			t.Fatalf("re-encoded record does not round-trip: %v", err)
		}
	})
}

func TestHealthLabels(t *testing.T) {
	for r, want := range map[pb.HealthReason]string{
		pb.HealthReason_HEALTH_REASON_SCRAPE_FAILED: "scrape_failed", pb.HealthReason_HEALTH_REASON_CONNECT_REFUSED: "connect_refused",
		pb.HealthReason_HEALTH_REASON_ZMQ_DOWN: "zmq_down", pb.HealthReason_HEALTH_REASON_RECOVERED: "recovered",
		pb.HealthReason_HEALTH_REASON_UNSPECIFIED: "unspecified", 77: "unspecified",
	} {
		if got := events.HealthReasonLabel(r); got != want {
			t.Errorf("HealthReasonLabel(%d) = %q, want %q", r, got, want)
		}
	}
	if len(events.HealthReasonLabels) != len(pb.HealthReason_name)-1 {
		t.Errorf("HealthReasonLabels %v misses a reason", events.HealthReasonLabels)
	}
	if got := events.HealthSourceLabel(pb.HealthSource_HEALTH_SOURCE_DOOR); got != "door" {
		t.Errorf("HealthSourceLabel(door) = %q", got)
	}
	if got := events.HealthSourceLabel(-1); got != "unspecified" {
		t.Errorf("HealthSourceLabel(-1) = %q", got)
	}
}
