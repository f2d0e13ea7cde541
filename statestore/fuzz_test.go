package statestore

import (
	"math"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
)

// FuzzApply feeds arbitrary bytes as record values of every topic through
// the real decode-and-apply path. Whatever decodes must apply without a
// panic, keep memory bounded (slots), leave a store that reopens to the
// same digest (no corruption), and answer queries.
func FuzzApply(f *testing.F) {
	for _, s := range eventstest.All() {
		v, _ := events.Marshal(s.Msg)
		t, _ := events.TopicOf(s.Msg)
		f.Add(uint8(topicIndex[t]), v, uint8(0))
	}
	// Mode 4: the value goes under the topic's side schema (a worker health
	// record on load).
	for _, s := range eventstest.Side() {
		v, _ := events.Marshal(s.Msg)
		t, _ := events.TopicOf(s.Msg)
		f.Add(uint8(topicIndex[t]), v, uint8(4))
	}
	// Hostile values that decode: a registration asking for 2^32-1 ranks,
	// samples for ranks and ids nobody registered, a future-dated sample.
	for _, m := range []proto.Message{
		registration("w00", pb.Pool_POOL_DECODE, 4, math.MaxUint32),
		registration("w00", pb.Pool_POOL_DECODE, 4, events.MaxDPSize),
		&pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "w00", DpRank: math.MaxUint32}, SampleTimeUnixNano: 1},
		&pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "ghost", DpRank: 3}, SampleTimeUnixNano: math.MaxInt64},
		kvRec("w00", 1023, 1, resetEv()),
		// A device store, then an offload store of its blocks and of one
		// never stored.
		kvRec("w00", 0, 1, stored(pb.Tier_TIER_DEVICE, nil, []uint64{1, 2}, tokens("X", 0, 1, 4), 4),
			stored(pb.Tier_TIER_HOST, nil, []uint64{2, 1, 9}, nil, 0)),
	} {
		v, _ := proto.Marshal(m)
		t, _ := events.TopicOf(m)
		f.Add(uint8(topicIndex[t]), v, uint8(0))
	}
	gen := newGenerator(3, 4)
	for _, e := range gen.events(40) {
		if e.msg == nil {
			continue
		}
		v, _ := events.Marshal(e.msg)
		t, _ := events.TopicOf(e.msg)
		f.Add(uint8(topicIndex[t]), v, uint8(1))
	}
	// Mode bit 8: a store of source load-deltas, seeded with deltas of
	// generated decisions and their completions on w00.
	for i, e := range gen.events(200) {
		d, ok := e.msg.(*pb.DecisionRecord)
		if !ok {
			continue
		}
		d = proto.Clone(d).(*pb.DecisionRecord)
		d.DecodeWorker = &pb.WorkerRef{WorkerId: "w00"}
		ld := &pb.LoadDelta{WriterId: "fuzz", Decisions: []*pb.DecisionDelta{DecisionDeltaOf(d)}}
		if i%2 == 0 {
			ld.Lifecycle = []*pb.LifecycleDelta{LifecycleDeltaOf(completedOutcome(d, i))}
		}
		if v, err := proto.Marshal(ld); err == nil {
			f.Add(uint8(topicIndex[events.TopicLoadDeltas]), v, uint8(8))
			// Mode bit 16: the same, held as open requests (Options.PeerSums).
			f.Add(uint8(topicIndex[events.TopicLoadDeltas]), v, uint8(8|16))
		}
	}
	// Mode bit 32: a store of source load-shares for replica w00, seeded
	// with snapshots of w00 (its own) and of a peer, and w00's deltas.
	for _, m := range []proto.Message{
		sharesOf("w00", 3, 1e18, shr("w00", 4, 1, 16, 1, 8), shr("w01", 0, 0, 0, 0, 0)),
		&pb.LoadDelta{WriterId: "w00", Decisions: []*pb.DecisionDelta{ownDecision("w00", "d", "w00", "", 1e18, 16).GetDecisions()[0]}},
	} {
		v, _ := proto.Marshal(m)
		t, _ := events.TopicOf(m)
		f.Add(uint8(topicIndex[t]), v, uint8(32))
		f.Add(uint8(topicIndex[t]), v, uint8(32|16))
	}
	f.Fuzz(func(t *testing.T, topic uint8, value []byte, mode uint8) {
		tp := events.AllTopics[int(topic)%len(events.AllTopics)]
		src := SourceDecisions
		if mode&8 != 0 {
			src = SourceLoadDeltas
		}
		var replica string
		if mode&32 != 0 {
			src, replica = SourceLoadShares, "w00"
		}
		// In memory: the Pebble store is real, its files cost no disk I/O
		// (on disk, opening, closing and reopening one store per input
		// held the fuzzer to a few inputs a second).
		fs := vfs.NewMem()
		o := Options{ActiveExpiry: time.Second, FS: fs, Source: src, PeerSums: mode&16 != 0, ReplicaID: replica}
		o.Registerer = prometheus.NewRegistry()
		s, err := Open("s", o)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// A little context first, so rules that need prior state run too.
		var recs []*kgo.Record
		off := map[events.Topic]int64{}
		add := func(t events.Topic, key []byte, v []byte, schema string) {
			// Log times after the generator's event times, as a producer's
			// clock would be: records are not skipped as future-dated.
			r := &kgo.Record{Topic: string(t), Key: key, Value: v, Offset: off[t], Timestamp: time.UnixMilli(2e12 + off[t])}
			if schema != "" {
				r.Headers = []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte(schema)}}
			}
			off[t]++
			recs = append(recs, r)
		}
		for _, e := range newGenerator(uint64(mode), 3).events(20) {
			if e.msg == nil {
				continue
			}
			v, _ := events.Marshal(e.msg)
			t, _ := events.TopicOf(e.msg)
			add(t, []byte(e.key), v, string(e.msg.ProtoReflect().Descriptor().FullName()))
		}
		key := []byte("w00")
		switch {
		case mode%2 == 0 && mode&4 != 0 && len(events.SideSchemas(tp)) > 0:
			add(tp, key, value, events.SideSchemas(tp)[0]) // a worker health record, for the load topic
		case mode%2 == 0:
			add(tp, key, value, events.SchemaOf(tp))
		default:
			add(tp, key, value, "")
			add(events.TopicWorkers, value, nil, "") // a tombstone with an arbitrary key
		}
		if err := s.Apply(recs); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(recs); err != nil { // a re-delivery
			t.Fatal(err)
		}
		// Memory follows what was applied, never a size a record declares:
		// a few workers' ranks, whatever the input.
		s.mu.RLock()
		slots := len(s.st.workers)
		s.mu.RUnlock()
		if slots > 32 {
			t.Fatalf("%d slots after 20 generated records and one fuzzed one", slots)
		}
		before := mustDigest(t, s)
		s.Read(func(v View) {
			ws := v.Workers()
			dst := make([]decider.TierOverlap, len(ws))
			act := make([]int, len(ws))
			for _, bs := range []int{4, 8, 16} {
				v.MatchPrefix(bs, chainOf("T1", 8, bs), dst)
				v.MatchActive(bs, chainOf("T1", 8, bs), act)
			}
			for i := range ws {
				_ = v.Active(i)
				_, _ = v.Load(i)
			}
		})
		_ = s.Close()
		o.Registerer = prometheus.NewRegistry()
		s2, err := Open(s.Dir(), o)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer s2.Close()
		if src == SourceLoadShares {
			// Its rows are read from the start again at every open.
			var shares []*kgo.Record
			for _, r := range recs {
				if r.Topic == string(events.TopicLoadShares) {
					shares = append(shares, r)
				}
			}
			if err := s2.Apply(shares); err != nil {
				t.Fatal(err)
			}
		}
		if after := mustDigest(t, s2); after.Hash != before.Hash || after.Private != before.Private {
			t.Fatalf("digest changed across reopen: %s vs %s", before, after)
		}
	})
}
