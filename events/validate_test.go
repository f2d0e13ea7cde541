package events_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
)

func goodRegistration() *pb.WorkerRegistration {
	return &pb.WorkerRegistration{WorkerId: "decode-1", Pool: pb.Pool_POOL_DECODE, Model: "m", BlockSize: 16,
		RegisteredAtUnixNano: 1764400000000000000}
}

// TestValidateRejectsHostileValues: every value that would make a replica
// allocate without bound, or name something it must not, is refused by
// Validate with a precise reason, on write (NewRecord) and on read (Decode).
func TestValidateRejectsHostileValues(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	reg := func(edit func(r *pb.WorkerRegistration)) proto.Message {
		r := goodRegistration()
		edit(r)
		return r
	}
	ref := func(rank uint32) *pb.WorkerRef { return &pb.WorkerRef{WorkerId: "decode-1", DpRank: rank} }
	cases := []struct {
		name   string
		msg    proto.Message
		reason string
		field  string
	}{
		{"dp_size 2^32-1", reg(func(r *pb.WorkerRegistration) { r.DpSize = math.MaxUint32 }), events.ReasonDPSize, "dp_size"},
		{"dp_size over the ceiling", reg(func(r *pb.WorkerRegistration) { r.DpSize = events.MaxDPSize + 1 }), events.ReasonDPSize, "dp_size"},
		{"worker id .", reg(func(r *pb.WorkerRegistration) { r.WorkerId = "." }), events.ReasonWorkerID, "worker_id"},
		{"worker id ..", reg(func(r *pb.WorkerRegistration) { r.WorkerId = ".." }), events.ReasonWorkerID, "worker_id"},
		{"long kv_events_topic", reg(func(r *pb.WorkerRegistration) { r.KvEventsTopic = long(events.MaxTopicLen + 1) }), events.ReasonFieldTooLong, "kv_events_topic"},
		{"long model", reg(func(r *pb.WorkerRegistration) { r.Model = long(events.MaxNameLen + 1) }), events.ReasonFieldTooLong, "model"},
		{"long kv_events_endpoint", reg(func(r *pb.WorkerRegistration) { r.KvEventsEndpoint = "tcp://" + long(events.MaxEndpointLen) }), events.ReasonFieldTooLong, "kv_events_endpoint"},
		{"long kv_replay_endpoint", reg(func(r *pb.WorkerRegistration) { r.KvReplayEndpoint = "tcp://" + long(events.MaxEndpointLen) }), events.ReasonFieldTooLong, "kv_replay_endpoint"},
		{"long metrics_url", reg(func(r *pb.WorkerRegistration) { r.MetricsUrl = "http://" + long(events.MaxEndpointLen) }), events.ReasonFieldTooLong, "metrics_url"},
		{"block_size 0", reg(func(r *pb.WorkerRegistration) { r.BlockSize = 0 }), events.ReasonBlockSize, "block_size"},
		{"block_size over the limit", reg(func(r *pb.WorkerRegistration) { r.BlockSize = events.MaxBlockSize + 1 }), events.ReasonBlockSize, "block_size"},
		{"kv event dp_rank over the ceiling", &pb.KvEventRecord{Worker: ref(events.MaxDPSize), EventTimeUnixNano: 1}, events.ReasonDPRank, "worker.dp_rank"},
		{"device store without tokens", kvStored(&pb.BlockStored{BlockHashes: []uint64{1}, BlockSize: 16, Tier: pb.Tier_TIER_DEVICE}), events.ReasonKvEvent, "events"},
		{"unspecified-tier store without tokens", kvStored(&pb.BlockStored{BlockHashes: []uint64{1}, BlockSize: 16}), events.ReasonKvEvent, "events"},
		{"offload store without hashes", kvStored(&pb.BlockStored{BlockSize: 16, Tier: pb.Tier_TIER_HOST}), events.ReasonKvEvent, "events"},
		{"offload store block_size over the limit", kvStored(&pb.BlockStored{BlockHashes: []uint64{1}, BlockSize: events.MaxBlockSize + 1, Tier: pb.Tier_TIER_HOST}), events.ReasonKvEvent, "events"},
		{"load dp_rank 2^32-1", &pb.LoadSample{Worker: ref(math.MaxUint32), SampleTimeUnixNano: 1}, events.ReasonDPRank, "worker.dp_rank"},
		{"negative load time", &pb.LoadSample{Worker: ref(0), SampleTimeUnixNano: -1}, events.ReasonNegativeTime, "event_time"},
		{"long decision id", &pb.DecisionRecord{DecisionId: long(events.MaxIDLen + 1), RequestId: "r", Mode: "local", DecodeWorker: ref(0)}, events.ReasonFieldTooLong, "decision_id"},
		{"decision without decode worker", &pb.DecisionRecord{DecisionId: "d", RequestId: "r", Mode: "local"}, events.ReasonWorkerID, "worker_id"},
		{"decision with a bad prefill rank", &pb.DecisionRecord{DecisionId: "d", RequestId: "r", Mode: "remote", DecodeWorker: ref(0), PrefillWorker: ref(math.MaxUint32)}, events.ReasonDPRank, "prefill_worker.dp_rank"},
		{"outcome without ids", &pb.OutcomeEvent{Kind: pb.OutcomeEvent_KIND_COMPLETED}, events.ReasonMissingID, "request_id"},
		{"long outcome request id", &pb.OutcomeEvent{RequestId: long(events.MaxIDLen + 1), Kind: pb.OutcomeEvent_KIND_COMPLETED}, events.ReasonFieldTooLong, "request_id"},
		{"long outcome error code", &pb.OutcomeEvent{RequestId: "r", Kind: pb.OutcomeEvent_KIND_CANCELLED, ErrorCode: long(events.MaxNameLen + 1)}, events.ReasonFieldTooLong, "error_code"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := events.ValidateAt(c.msg, time.Now())
			var ve *events.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("ValidateAt = %v, want a *ValidationError", err)
			}
			if ve.Reason != c.reason || ve.Field != c.field {
				t.Fatalf("reason %q field %q, want %q %q (%v)", ve.Reason, ve.Field, c.reason, c.field, err)
			}
			if _, err := events.NewRecord(names, []byte("k"), c.msg); err == nil {
				t.Fatal("NewRecord wrote it")
			}
			// The same value written by a producer that skips validation is
			// refused by Decode, with the same reason as the metric label.
			tp, _ := events.TopicOf(c.msg)
			v, _ := proto.Marshal(c.msg)
			r := &kgo.Record{Topic: names.Physical(tp), Key: []byte("k"), Value: v, Timestamp: time.Now(),
				Headers: []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte(events.SchemaOf(tp))}}}
			_, err = events.Decode(names, r)
			if !errors.Is(err, events.ErrInvalid) || events.Reason(err) != c.reason {
				t.Fatalf("Decode = %v (reason %q), want invalid with reason %q", err, events.Reason(err), c.reason)
			}
		})
	}
}

func kvStored(s *pb.BlockStored) *pb.KvEventRecord {
	return &pb.KvEventRecord{Worker: &pb.WorkerRef{WorkerId: "decode-1"}, EventTimeUnixNano: 1,
		Events: []*pb.KvEvent{{Event: &pb.KvEvent_Stored{Stored: s}}}}
}

// TestValidateOffloadStore: a host or disk BlockStored without tokens (an
// offload store) is valid, with any block size up to the limit, 0 included.
func TestValidateOffloadStore(t *testing.T) {
	for _, s := range []*pb.BlockStored{
		{BlockHashes: []uint64{1, 2}, BlockSize: 16, Tier: pb.Tier_TIER_HOST, Medium: "CPU"},
		{BlockHashes: []uint64{1}, Tier: pb.Tier_TIER_DISK},
	} {
		if !events.IsOffloadStore(s) {
			t.Fatalf("%v is no offload store", s)
		}
		if err := events.Validate(kvStored(s)); err != nil {
			t.Fatalf("%v: %v", s, err)
		}
	}
	if events.IsOffloadStore(&pb.BlockStored{BlockHashes: []uint64{1}, TokenIds: make([]uint32, 16), BlockSize: 16, Tier: pb.Tier_TIER_HOST}) {
		t.Fatal("a host store with tokens is an ordinary store")
	}
}

// TestEventTimeBoundedByLogTime: a record dated more than MaxEventSkew
// after its Kafka timestamp (the writer's clock) is refused on read, and a
// writer cannot produce one.
func TestEventTimeBoundedByLogTime(t *testing.T) {
	logTime := time.Unix(1764400000, 0)
	year2096 := time.Date(2096, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	load := &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "decode-1"}, SampleTimeUnixNano: year2096}
	v, _ := proto.Marshal(load)
	r := &kgo.Record{Topic: names.Physical(events.TopicLoad), Key: []byte("decode-1"), Value: v, Timestamp: logTime,
		Headers: []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte(events.SchemaOf(events.TopicLoad))}}}
	_, err := events.Decode(names, r)
	if events.Reason(err) != events.ReasonFutureTime {
		t.Fatalf("a sample dated 2096 at log time %s: Decode = %v, want reason %s", logTime, err, events.ReasonFutureTime)
	}
	if _, err := events.NewRecord(names, []byte("decode-1"), load); events.ValidationReason(err) != events.ReasonFutureTime {
		t.Fatalf("NewRecord of a sample dated 2096 = %v, want %s", err, events.ReasonFutureTime)
	}
	// Within the skew it is accepted; just past it, not.
	for _, c := range []struct {
		at time.Duration
		ok bool
	}{{events.MaxEventSkew, true}, {events.MaxEventSkew + time.Nanosecond, false}, {-time.Hour, true}} {
		load.SampleTimeUnixNano = logTime.Add(c.at).UnixNano()
		r.Value, _ = proto.Marshal(load)
		if _, err := events.Decode(names, r); (err == nil) != c.ok {
			t.Fatalf("event time log time %+v: Decode = %v, want ok=%v", c.at, err, c.ok)
		}
	}
}

// TestSamplesStayValid: the shared samples (golden files, round trips)
// pass the new bounds.
func TestSamplesStayValid(t *testing.T) {
	for _, s := range eventstest.All() {
		var err error
		// A keyed record's rules read its key; its times are checked
		// against a log time of its own (content only here).
		switch m := s.Msg.(type) {
		case *pb.LoadDelta:
			err = events.ValidateLoadDelta(m, string(s.Key), time.Time{})
		case *pb.LoadShares:
			err = events.ValidateLoadShares(m, string(s.Key), time.Time{})
		default:
			err = events.ValidateAt(s.Msg, time.Now())
		}
		if err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
}

// TestWorkerIDEveryASCIIByte: each ASCII byte inside an id is accepted
// exactly when it is a printable rune, not a space and not '/', the rule
// for any rune, whichever path of ValidateWorkerID checks it.
func TestWorkerIDEveryASCIIByte(t *testing.T) {
	for c := rune(0); c < utf8.RuneSelf; c++ {
		want := unicode.IsPrint(c) && !unicode.IsSpace(c) && c != '/'
		for _, id := range []string{"a" + string(c) + "b", "é" + string(c)} {
			if got := events.ValidateWorkerID(id) == nil; got != want {
				t.Errorf("worker id %q: accepted %v, want %v", id, got, want)
			}
		}
	}
}
