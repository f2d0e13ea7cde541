package statestore

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// hostileRecords are one or more records per topic that a producer
// bypassing the API and events.NewRecord can write, each with the reason
// every replica must skip it for ("" when it is valid and must apply
// without harm).
func hostileRecords(names events.Names, now time.Time) (recs []*kgo.Record, reasons []string) {
	add := func(t events.Topic, key string, schema string, value []byte, reason string) {
		r := &kgo.Record{Topic: names.Physical(t), Key: []byte(key), Value: value, Timestamp: now}
		if schema != "" {
			r.Headers = []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte(schema)}}
		}
		recs = append(recs, r)
		reasons = append(reasons, reason)
	}
	msg := func(t events.Topic, key string, m proto.Message, reason string) {
		v, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		add(t, key, events.SchemaOf(t), v, reason)
	}
	year2096 := time.Date(2096, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	add(events.TopicKvEvents, "w00", events.SchemaOf(events.TopicKvEvents), []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, events.ErrMalformed.Error())
	add(events.TopicKvEvents, "w00", events.SchemaOf(events.TopicLoad), []byte{0x0a, 0x00}, events.ErrWrongTopic.Error())
	add(events.TopicKvEvents, "w00", "pdrouter.events.v9.KvEventRecord", []byte{0x0a, 0x00}, events.ErrUnknownSchema.Error())
	add(events.TopicLoad, "w00", "", []byte{0x0a, 0x00}, events.ErrMissingSchema.Error())
	msg(events.TopicWorkers, "poison", &pb.WorkerRegistration{WorkerId: "poison", Pool: pb.Pool_POOL_DECODE, Model: "m", BlockSize: 4,
		DpSize: math.MaxUint32, RegisteredAtUnixNano: now.UnixNano()}, events.ReasonDPSize)
	msg(events.TopicWorkers, "..", &pb.WorkerRegistration{WorkerId: "..", Pool: pb.Pool_POOL_DECODE, Model: "m", BlockSize: 4}, events.ReasonWorkerID)
	msg(events.TopicLoad, "w00", &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "w00"}, SampleTimeUnixNano: year2096}, events.ReasonFutureTime)
	msg(events.TopicLoad, "w00", &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "w00", DpRank: math.MaxUint32}, SampleTimeUnixNano: 1}, events.ReasonDPRank)
	// A rank beyond w00's dp_size: skipped (dp_rank_out_of_range) when the
	// registration was applied first, else kept and then purged by it; the
	// same state either way, so no count is asserted.
	msg(events.TopicKvEvents, "w00", &pb.KvEventRecord{Worker: &pb.WorkerRef{WorkerId: "w00", DpRank: 7}, EventTimeUnixNano: 1,
		Events: []*pb.KvEvent{{Event: &pb.KvEvent_Cleared{Cleared: &pb.AllBlocksCleared{}}}}}, "")
	msg(events.TopicDecisions, "d", &pb.DecisionRecord{DecisionId: "absurd", RequestId: "r", Mode: "sideways",
		DecodeWorker: &pb.WorkerRef{WorkerId: "w00"}, PromptTokens: math.MaxUint32, DecidedAtUnixNano: 1}, events.ReasonMode)
	msg(events.TopicDecisions, "d", &pb.DecisionRecord{DecisionId: "future", RequestId: "r", Mode: "local",
		DecodeWorker: &pb.WorkerRef{WorkerId: "w00"}, DecidedAtUnixNano: year2096}, events.ReasonFutureTime)
	msg(events.TopicOutcomes, "o", &pb.OutcomeEvent{Kind: pb.OutcomeEvent_KIND_COMPLETED, EventTimeUnixNano: 1}, events.ReasonMissingID)
	// Load deltas: garbage, an entry for another worker than the key, a
	// future decision, and past the size bound.
	add(events.TopicLoadDeltas, "w00", events.SchemaOf(events.TopicLoadDeltas), []byte{0x12, 0xff, 0xff, 0xff, 0xff, 0x0f}, events.ReasonDeltaMalformed)
	entry := &pb.DecisionDelta{DecisionId: "x", RequestId: "r", DecidedAtUnixNano: 1, DecodeWorker: &pb.WorkerRef{WorkerId: "w01"}, BlockSize: 16, PromptTokens: 32}
	msg(events.TopicLoadDeltas, "w00", &pb.LoadDelta{Decisions: []*pb.DecisionDelta{entry}}, events.ReasonDeltaKeyMismatch)
	future := proto.Clone(entry).(*pb.DecisionDelta)
	future.DecodeWorker, future.DecidedAtUnixNano = &pb.WorkerRef{WorkerId: "w00"}, year2096
	msg(events.TopicLoadDeltas, "w00", &pb.LoadDelta{Decisions: []*pb.DecisionDelta{future}}, events.ReasonDeltaEventTime)
	add(events.TopicLoadDeltas, "w00", events.SchemaOf(events.TopicLoadDeltas), make([]byte, events.MaxDeltaBytes+1), events.ReasonDeltaTooLarge)
	// Valid, for a worker nobody registered: kept within the unregistered
	// budget, harmless.
	msg(events.TopicKvEvents, "ghost", &pb.KvEventRecord{Worker: &pb.WorkerRef{WorkerId: "ghost"}, EventTimeUnixNano: 1,
		Events: []*pb.KvEvent{{Event: &pb.KvEvent_Removed{Removed: &pb.BlockRemoved{BlockHashes: []uint64{1}}}}}}, "")
	// Huge but valid: 40,000 one-token blocks in one BlockStored (~0.5 MB).
	n := 40000
	big := &pb.BlockStored{BlockSize: 1, BlockHashes: make([]uint64, n), TokenIds: make([]uint32, n)}
	for i := range big.BlockHashes {
		big.BlockHashes[i], big.TokenIds[i] = uint64(i+1)*0x9E3779B97F4A7C15, uint32(i)
	}
	msg(events.TopicKvEvents, "ghost", &pb.KvEventRecord{Worker: &pb.WorkerRef{WorkerId: "ghost"}, EventTimeUnixNano: 1,
		Events: []*pb.KvEvent{{Event: &pb.KvEvent_Stored{Stored: big}}}}, "")
	return recs, reasons
}

// TestRealKafkaHostileRecordsSkipped: on the real broker, one hostile
// record per topic written with a raw producer (garbage bytes, wrong or
// missing schema headers, dp_size 2^32-1, a future-dated sample, a rank no
// worker has, absurd decisions, an outcome without ids, a huge valid
// record) between good ones: a replica applies the good ones, skips and
// counts each bad one by reason, reopens on its store to the same digest,
// and a fresh replica reaches the same digest.
//
// Both sources run it: a store of source load-deltas never fetches the
// decisions and outcomes topics, and skips the hostile load deltas.
func TestRealKafkaHostileRecordsSkipped(t *testing.T) {
	for _, src := range []Source{SourceDecisions, SourceLoadDeltas} {
		t.Run(src.String(), func(t *testing.T) { testRealKafkaHostileRecordsSkipped(t, src) })
	}
}

func testRealKafkaHostileRecordsSkipped(t *testing.T, src Source) {
	brokers := kafkatest.Brokers(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	names := events.Names{Prefix: prefix}
	gen := newGenerator(41, 6)
	evs := gen.events(300)
	produce(t, brokers, prefix, evs[:150])
	bad, reasons := hostileRecords(names, time.UnixMilli(produceClock.Add(1)))
	cl := kafkatest.Client(t, brokers, kgo.ProducerBatchMaxBytes(2<<20))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, bad...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	produce(t, brokers, prefix, evs[150:])
	// The generated decisions' and outcomes' load deltas, as their writers
	// would have appended them.
	var deltas []genEvent
	for _, e := range evs {
		switch m := e.msg.(type) {
		case *pb.DecisionRecord:
			deltas = append(deltas, genEvent{key: e.key, msg: &pb.LoadDelta{WriterId: "gen", Decisions: []*pb.DecisionDelta{DecisionDeltaOf(m)}}})
		case *pb.OutcomeEvent:
			deltas = append(deltas, genEvent{key: e.key, msg: &pb.LoadDelta{WriterId: "gen", Lifecycle: []*pb.LifecycleDelta{LifecycleDeltaOf(m)}}})
		}
	}
	if src != SourceLoadDeltas {
		deltas = nil
	}
	produce(t, brokers, prefix, deltas)
	t.Logf("%d load deltas of generated decisions and outcomes", len(deltas))

	dir := t.TempDir()
	open := func(name string) (*replica, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		s, err := Open(filepath.Join(dir, name), Options{Names: names, Registerer: reg, Source: src})
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewMaterializer(s, MaterializerOptions{Client: []kgo.Opt{kgo.SeedBrokers(brokers...)}})
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{s, m}
		t.Cleanup(r.close)
		return r, reg
	}
	a, reg := open("a")
	start := time.Now()
	da := a.catchUp(t)
	t.Logf("replica a caught up in %s: %s", time.Since(start).Round(time.Millisecond), da)
	read := len(deltas) // the records of the topics the source reads
	for _, e := range evs {
		if e.msg == nil {
			read++ // a tombstone on workers
		} else if tp, _ := events.TopicOf(e.msg); src.Applies(tp) {
			read++
		}
	}
	for _, r := range bad {
		if tp, _ := names.Logical(r.Topic); src.Applies(tp) {
			read++
		}
	}
	if got := sumOffsets(da.Offsets); got != int64(read) {
		t.Fatalf("replica a is at %d records, want %d: it stalled", got, read)
	}
	h := &harness{t: t, reg: reg}
	want := map[string]float64{}
	for i, r := range reasons {
		if tp, _ := names.Logical(bad[i].Topic); r != "" && src.Applies(tp) {
			tp, _ := names.Logical(bad[i].Topic)
			want[string(tp)+"/"+r]++
		}
	}
	for k, n := range want {
		tp, reason, _ := cut(k)
		if got := h.invalid(events.Topic(tp), reason); got < n {
			t.Errorf("records_invalid{topic=%s,reason=%s} = %v, want ≥ %v", tp, reason, got, n)
		}
	}
	a.close()
	a, _ = open("a")
	if again := a.catchUp(t); again.Hash != da.Hash {
		t.Fatalf("after a restart on its store: digest %s, before %s", again, da)
	}
	b, _ := open("b")
	if db := b.catchUp(t); db.Hash != da.Hash || db.Offsets.String() != da.Offsets.String() {
		t.Fatalf("fresh replica %s at %s, replica a %s at %s", db, db.Offsets, da, da.Offsets)
	}
}

func cut(k string) (string, string, bool) {
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			return k[:i], k[i+1:], true
		}
	}
	return k, "", false
}
