package events_test

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
)

var fuzzLogTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// FuzzDecode: no input makes Decode panic, and whatever it accepts is valid
// and re-encodes to a record that decodes to the same message.
func FuzzDecode(f *testing.F) {
	for _, s := range eventstest.All() {
		r, err := events.NewRecord(names, s.Key, s.Msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(0), events.SchemaOf(events.Topic(s.Name)), r.Value)
	}
	// An event dated decades past its record's log time: Decode must refuse
	// it, because no writer can put it on the log again.
	future := &pb.OutcomeEvent{}
	for _, s := range eventstest.All() {
		if o, ok := s.Msg.(*pb.OutcomeEvent); ok {
			future = proto.Clone(o).(*pb.OutcomeEvent)
		}
	}
	future.EventTimeUnixNano = time.Date(2087, 7, 25, 7, 4, 8, 0, time.UTC).UnixNano()
	v, err := events.Marshal(future)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(4), events.SchemaOf(events.TopicOutcomes), v)
	for _, s := range eventstest.Side() {
		v, err := events.Marshal(s.Msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(1), string(s.Msg.ProtoReflect().Descriptor().FullName()), v)
	}
	// Forwarded lifecycle events on their own topic: hostile kinds,
	// numbers and ids are refused, never applied.
	fwd := uint8(slices.Index(events.AllTopics, events.TopicForwards))
	for _, v := range [][]byte{
		{0x0a, 0x01, 'r', 0x10, 0x02, 0x19, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f, 0x3a, 0x01, 'f'}, // ttft NaN
		{0x0a, 0x01, 'r', 0x10, 0x63, 0x3a, 0x01, 'f'},                                     // kind 99
		{0x0a, 0x01, 'r', 0x10, 0x01, 0x20, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x3a, 0x01, 'f'}, // tokens
	} {
		f.Add(fwd, events.SchemaOf(events.TopicForwards), v)
	}
	f.Add(uint8(2), "", []byte(nil))
	f.Add(uint8(1), "pdrouter.events.v2.LoadSample", []byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, topic uint8, schema string, value []byte) {
		tp := events.AllTopics[int(topic)%len(events.AllTopics)]
		// Every record a broker hands out has a log time, and Decode bounds
		// event times by it; a fixed one in the past keeps each input's
		// verdict the same on every run and lets NewRecord, which checks
		// against the wall clock, write whatever Decode accepts.
		r := &kgo.Record{Topic: names.Physical(tp), Key: []byte("k"), Value: value, Timestamp: fuzzLogTime}
		if schema != "" {
			r.Headers = []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte(schema)}}
		}
		env, err := events.Decode(names, r)
		if err != nil {
			if env != nil {
				t.Fatal("Decode returned both an envelope and an error")
			}
			return
		}
		if env.Tombstone() {
			return
		}
		if err := events.ValidateAt(env.Message, r.Timestamp); err != nil {
			t.Fatalf("accepted an invalid message: %v", err)
		}
		again, err := events.NewRecord(names, r.Key, env.Message)
		if err != nil {
			t.Fatalf("cannot re-encode an accepted message: %v", err)
		}
		env2, err := events.Decode(names, again)
		if err != nil || !proto.Equal(env.Message, env2.Message) {
			t.Fatalf("re-encoded record does not round-trip: %v", err)
		}
	})
}
