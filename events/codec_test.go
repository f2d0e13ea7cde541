package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
)

var names = events.Names{Prefix: "prod."}

func TestRoundTripEverySchema(t *testing.T) {
	for _, s := range eventstest.All() {
		t.Run(s.Name, func(t *testing.T) {
			r, err := events.NewRecord(names, s.Key, s.Msg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Topic != "prod."+s.Name {
				t.Fatalf("topic %q, want prod.%s", r.Topic, s.Name)
			}
			env, err := events.Decode(names, r)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(env.Message, s.Msg) {
				t.Fatalf("decoded %v\nwant %v", env.Message, s.Msg)
			}
			again, _ := events.NewRecord(names, s.Key, env.Message)
			if string(again.Value) != string(r.Value) {
				t.Fatal("re-encoding a decoded record changed its bytes: encoding is not deterministic")
			}
		})
	}
}

func TestTombstone(t *testing.T) {
	env, err := events.Decode(names, events.NewTombstone(names, "decode-1"))
	if err != nil || !env.Tombstone() || string(env.Key) != "decode-1" {
		t.Fatalf("tombstone: env=%+v err=%v", env, err)
	}
}

// TestBadRecordsGiveTypedErrors: every way a record can be wrong yields a
// *DecodeError of the right kind that names topic, partition and offset.
func TestBadRecordsGiveTypedErrors(t *testing.T) {
	good, _ := events.NewRecord(names, []byte("w"), eventstest.OneBlockStored())
	hdr := func(s string) []kgo.RecordHeader {
		return []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte(s)}}
	}
	badBlock := eventstest.OneBlockStored()
	badBlock.Events[0].GetStored().TokenIds = badBlock.Events[0].GetStored().TokenIds[:5]
	badBlockBytes, _ := proto.Marshal(badBlock)
	cases := []struct {
		name   string
		rec    kgo.Record
		kind   error
		msg    string
		reason string // the metric reason, when it is more precise than the kind
	}{
		{"garbage bytes", kgo.Record{Topic: "prod.kv-events", Value: []byte{0xff, 0xff, 0xff, 0x01}, Headers: good.Headers}, events.ErrMalformed, "cannot parse", ""},
		{"no schema header", kgo.Record{Topic: "prod.kv-events", Value: good.Value}, events.ErrMissingSchema, "pdr-schema", ""},
		{"unknown schema version", kgo.Record{Topic: "prod.kv-events", Value: good.Value, Headers: hdr("pdrouter.events.v9.KvEventRecord")}, events.ErrUnknownSchema, "this build reads pdrouter.events.v1.KvEventRecord", ""},
		{"schema of another topic", kgo.Record{Topic: "prod.load", Value: good.Value, Headers: good.Headers}, events.ErrWrongTopic, "another topic", ""},
		{"foreign topic", kgo.Record{Topic: "other.kv-events", Value: good.Value, Headers: good.Headers}, events.ErrWrongTopic, "prefix", ""},
		{"tombstone on kv-events", kgo.Record{Topic: "prod.kv-events"}, events.ErrUnexpectedTombstone, "only the workers topic", ""},
		{"tombstone without key", kgo.Record{Topic: "prod.workers"}, events.ErrInvalid, "worker id", ""},
		{"oversized", kgo.Record{Topic: "prod.kv-events", Value: make([]byte, events.MaxValueBytes+1), Headers: good.Headers}, events.ErrTooLarge, "limit", ""},
		{"token count mismatch", kgo.Record{Topic: "prod.kv-events", Value: badBlockBytes, Headers: good.Headers}, events.ErrInvalid, "5 token ids for 1 blocks of 16", events.ReasonKvEvent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.rec.Partition, c.rec.Offset = 3, 4242
			_, err := events.Decode(names, &c.rec)
			var de *events.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("got %v, want a *DecodeError", err)
			}
			if !errors.Is(err, c.kind) {
				t.Fatalf("kind %v, want %v", de.Kind, c.kind)
			}
			if de.Partition != 3 || de.Offset != 4242 || !strings.Contains(err.Error(), c.rec.Topic+"/3@4242") {
				t.Fatalf("error %q does not name %s/3@4242", err, c.rec.Topic)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %q does not say %q", err, c.msg)
			}
			want := c.kind.Error()
			if c.reason != "" {
				want = c.reason
			}
			if got := events.Reason(err); got != want {
				t.Fatalf("metric reason %q, want %q", got, want)
			}
		})
	}
}

func TestNewRecordRefusesInvalid(t *testing.T) {
	cases := map[string]proto.Message{
		"no worker":        &pb.LoadSample{},
		"bad pool":         &pb.WorkerRegistration{WorkerId: "w", BlockSize: 16},
		"zero block size":  &pb.WorkerRegistration{WorkerId: "w", Pool: pb.Pool_POOL_DECODE},
		"space in id":      &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "a b"}},
		"bad mode":         &pb.DecisionRecord{DecisionId: "d", RequestId: "r", Mode: "sideways", DecodeWorker: &pb.WorkerRef{WorkerId: "w"}},
		"outcome no kind":  &pb.OutcomeEvent{RequestId: "r"},
		"empty kv event":   &pb.KvEventRecord{Worker: &pb.WorkerRef{WorkerId: "w"}, Events: []*pb.KvEvent{{}}},
		"removed no hash":  &pb.KvEventRecord{Worker: &pb.WorkerRef{WorkerId: "w"}, Events: []*pb.KvEvent{{Event: &pb.KvEvent_Removed{Removed: &pb.BlockRemoved{}}}}},
		"stored no hashes": &pb.KvEventRecord{Worker: &pb.WorkerRef{WorkerId: "w"}, Events: []*pb.KvEvent{{Event: &pb.KvEvent_Stored{Stored: &pb.BlockStored{BlockSize: 16}}}}},
	}
	for name, m := range cases {
		if _, err := events.NewRecord(names, []byte("w"), m); err == nil {
			t.Errorf("%s: NewRecord accepted an invalid record", name)
		}
	}
	if _, err := events.NewRecord(names, nil, &pb.KvEvent{}); err == nil {
		t.Error("NewRecord accepted a message that belongs to no topic")
	}
}

func TestTopicNames(t *testing.T) {
	if err := events.ValidatePrefix("prod.eu-1_"); err != nil {
		t.Fatal(err)
	}
	if err := events.ValidatePrefix("bad/prefix"); err == nil || !strings.Contains(err.Error(), "'/'") {
		t.Fatalf("bad prefix: %v", err)
	}
	if _, err := events.ParseTopic("decision"); err == nil || !strings.Contains(err.Error(), "decisions") {
		t.Fatalf("ParseTopic should list valid topics: %v", err)
	}
	if tp, ok := names.Logical("prod.outcomes"); !ok || tp != events.TopicOutcomes {
		t.Fatal("Logical(prod.outcomes)")
	}
	if _, ok := names.Logical("prod.nope"); ok {
		t.Fatal("Logical accepted an unknown topic")
	}
}

func TestWorkerRankRoundTrip(t *testing.T) {
	for _, c := range []struct {
		id   string
		rank uint32
	}{{"decode-1", 0}, {"decode-1", 3}, {"d", 12}} {
		s := events.WorkerRank(c.id, c.rank)
		id, rank, ok := events.ParseWorkerRank(s)
		if !ok || id != c.id || rank != c.rank {
			t.Errorf("%q parsed to %q %d %v", s, id, rank, ok)
		}
	}
	for _, bad := range []string{"a/b", "a/dp0", "a/dp01", "a/dpx", "a/b/dp1"} {
		if _, _, ok := events.ParseWorkerRank(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	if err := events.ValidateWorkerID("a/dp1"); err == nil {
		t.Error("a worker id with '/' was accepted")
	}
}
