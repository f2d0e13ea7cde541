package statestore

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// A slot is freed only when it holds nothing the store keeps. Its KV-event
// health (the 'h' key: latest KV event, the events' block size, first
// load sample) is such a thing: a slot freed with it, and made again for
// the same worker by a later record, starts from zero health and writes
// that over the key. Whether a slot is found empty at the end of a chunk
// depends on where the chunk ends, which depends on the wall clock
// (chunkHold) and on how the log was fetched, so replicas disagreed; this
// was seen on the real broker with four replicas catching up at once.
//
// The history: an unregistered worker stores a block and evicts it (its
// health now names a KV event and block size 16), a decision names it, and
// a later outcome moves the requests' event-time clock past the decision's
// retention,
// so the decision's fact goes and asks for the slot to be freed. Then a
// load sample of the worker arrives. Applied in one chunk or split before
// the load sample, the state must be the same.
func TestSlotWithHealthIsNotFreed(t *testing.T) {
	history := func(h *harness) []*kgo.Record {
		t0 := h.clock * int64(time.Millisecond)
		later := func(r *kgo.Record) *kgo.Record { // stamped two days on, as its event time
			r.Timestamp = r.Timestamp.Add(48 * time.Hour)
			return r
		}
		chain := chainOf("A", 0, 16)
		u := &pb.WorkerRef{WorkerId: "u"}
		return []*kgo.Record{
			h.record("u", kvRec("u", 0, t0, stored(pb.Tier_TIER_DEVICE, nil, []uint64{7}, tokens("A", 0, 0, 16), 16))),
			h.record("u", kvRec("u", 0, t0, removed(pb.Tier_TIER_DEVICE, 7))),
			h.record("u", &pb.DecisionRecord{DecisionId: "d1", RequestId: "q1", Mode: "local", DecodeWorker: u,
				PromptTokens: 20, EffectiveIsl: 20, DecidedAtUnixNano: t0, ReplicaId: "r0",
				Chains:     []*pb.HashChain{{BlockSize: 16, BlockHashes: chain}},
				Candidates: []*pb.Candidate{{Worker: u, Pool: pb.Pool_POOL_DECODE, BlockSize: 16}}}),
			later(h.record("v", &pb.OutcomeEvent{RequestId: "q2", DecodeWorker: &pb.WorkerRef{WorkerId: "v"}, Kind: pb.OutcomeEvent_KIND_CANCELLED,
				EventTimeUnixNano: t0 + 48*int64(time.Hour)})),
			later(h.record("u", &pb.LoadSample{Worker: u, SampleTimeUnixNano: t0 + 48*int64(time.Hour)})),
		}
	}
	one := newHarness(t, 4)
	one.apply(history(one)...)
	split := newHarness(t, 4)
	recs := history(split)
	split.apply(recs[:4]...)
	split.apply(recs[4:]...)
	if a, b := one.digest(), split.digest(); a.Hash != b.Hash {
		t.Fatalf("one chunk %s, split before the load sample %s: %v", a, b, diffKeys(dumpKeys(t, one.s), dumpKeys(t, split.s)))
	}
	// And the state says what happened: a KV event of block size 16 was seen.
	v := dumpKeys(t, split.s)[`"hu\x00\x00\x00\x00\x00"`]
	if len(v) != 42 || v[34:] != "10000000" {
		t.Fatalf("health of u %x: want the events' block size 16 kept", v)
	}
}
