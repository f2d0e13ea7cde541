package ingest

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/kvhash"
	"github.com/pdrouter/pdrouter/statestore"
)

// offloadBatch is one vLLM batch as its OffloadingConnector (CPU backend)
// makes it, as msgspec encodes it (vectors.json, positional_offload_CPU_batch;
// tests/python checks that msgspec reproduces it): the scheduler's GPU
// BlockStored of two blocks with their tokens, the connector's BlockStored of
// medium CPU for the same engine hashes and one the GPU never announced, with
// empty token_ids and no parent (vllm-project/vllm 0072b0b7,
// offloading/scheduler.py take_events), then the GPU's eviction of the second
// block.
func offloadBatch(t testing.TB) []byte {
	t.Helper()
	payloads, _ := loadVectors(t)
	return payloads["positional_offload_CPU_batch"]
}

// TestOffloadCPUStoreResolvesThroughEngineTable: vLLM's CPU BlockStored, which
// names the blocks only by the engine hashes they had on the GPU, reaches the
// router's state as host-tier blocks: the GPU still holds block 0, the host
// tier block 1, and the engine hash the GPU never announced is skipped.
func TestOffloadCPUStoreResolvesThroughEngineTable(t *testing.T) {
	b := mustDecode(t, offloadBatch(t), pb.Engine_ENGINE_VLLM)
	if len(b.Demoted) != 0 {
		t.Fatalf("demoted %+v; want the CPU BlockStored kept", b.Demoted)
	}
	cpu := b.Events[1].GetStored()
	if cpu == nil || cpu.GetTier() != pb.Tier_TIER_HOST || len(cpu.GetTokenIds()) != 0 || cpu.ParentBlockHash != nil {
		t.Fatalf("CPU event decoded as %v; want a host-tier BlockStored without tokens or parent", b.Events[1])
	}

	got := routerOverlap(t, &pb.KvEventRecord{Worker: &pb.WorkerRef{WorkerId: "w"}, EventTimeUnixNano: b.TimeUnixNano, Events: b.Events})
	if want := (decider.TierOverlap{Device: 1, Host: 1}); got != want {
		t.Fatalf("router state %+v; want %+v: block 0 on the GPU, block 1 offloaded to the CPU tier", got, want)
	}
}

// TestOffloadOverZMQ: the same batch from a real ZMQ PUB, through ingest's
// SUB, sequencing and record building, into a real store.
func TestOffloadOverZMQ(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx, zmq4.WithLogger(ZMQLogger(nil)))
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	runIngest(t, Config{Sources: []SourceConfig{{WorkerID: "w", Endpoint: "tcp://" + pub.Addr().String(), Topic: "kv@"}}}, Deps{Sink: sink})
	// PUB drops what it sends before the subscription arrives: batches of
	// no consequence go first, until ingest has written one.
	var seq uint64
	send := func(p []byte) {
		if err := pub.Send(zmq4.NewMsgFrom([]byte("kv@w"), SeqFrame(seq), p)); err != nil {
			t.Fatal(err)
		}
		seq++
	}
	waitFor(t, 10*time.Second, "a first batch", func() bool {
		send(seqPayload(t, seq))
		time.Sleep(20 * time.Millisecond)
		return len(sink.kv()) > 0
	})
	batch := offloadBatch(t)
	send(batch)
	var recs []*pb.KvEventRecord
	waitFor(t, 10*time.Second, "the offload batch", func() bool {
		recs = sink.kv()
		return bytes.Equal(recs[len(recs)-1].GetRaw().GetPayload(), batch)
	})
	got := routerOverlap(t, recs...)
	if want := (decider.TierOverlap{Device: 1, Host: 1}); got != want {
		t.Fatalf("router state %+v after %v; want %+v", got, summary(recs), want)
	}
}

// routerOverlap applies recs of worker "w" (block size 16) to a real store
// and returns how much of the chain of tokens 1-32 (the vectors' blocks)
// it holds, per tier.
func routerOverlap(t *testing.T, recs ...*pb.KvEventRecord) decider.TierOverlap {
	t.Helper()
	st, err := statestore.Open(t.TempDir(), statestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	msgs := []proto.Message{&pb.WorkerRegistration{WorkerId: "w", Pool: pb.Pool_POOL_DECODE, Model: "m", BlockSize: 16}}
	for _, r := range recs {
		msgs = append(msgs, r)
	}
	var krecs []*kgo.Record
	offsets := map[string]int64{}
	for _, m := range msgs {
		r, err := events.NewRecord(events.Names{}, events.WorkerKey("w"), m)
		if err != nil {
			t.Fatal(err)
		}
		r.Offset = offsets[r.Topic]
		offsets[r.Topic]++
		krecs = append(krecs, r)
	}
	if err := st.Apply(krecs); err != nil {
		t.Fatal(err)
	}
	chain := kvhash.Chain(nil, seqTokens(1, 32), 16, 0, false)
	var got []decider.TierOverlap
	st.Read(func(v statestore.View) {
		got = make([]decider.TierOverlap, len(v.Workers()))
		v.MatchPrefix(16, chain, got)
	})
	if len(got) != 1 {
		t.Fatalf("%d workers in the state, want 1", len(got))
	}
	return got[0]
}

// TestSplitKvOffloadStore: an offload store too big for a record splits by
// hashes, every part still an offload store of the same tier, since each of
// its blocks resolves on its own.
func TestSplitKvOffloadStore(t *testing.T) {
	hashes := make([]uint64, 20_000)
	for i := range hashes {
		hashes[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	rec := &pb.KvEventRecord{
		Worker: &pb.WorkerRef{WorkerId: "w"}, EventTimeUnixNano: 5,
		Events: []*pb.KvEvent{{Event: &pb.KvEvent_Stored{Stored: &pb.BlockStored{BlockHashes: hashes, BlockSize: 16, Medium: "CPU", Tier: pb.Tier_TIER_HOST}}}},
	}
	const limit = 8_000
	parts, err := splitKv(rec, limit)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for i, p := range parts {
		if n := proto.Size(p); n > limit {
			t.Fatalf("part %d is %d bytes", i, n)
		}
		if err := events.Validate(p); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		for _, e := range p.GetEvents() {
			s := e.GetStored()
			if !events.IsOffloadStore(s) || s.GetMedium() != "CPU" || s.ParentBlockHash != nil {
				t.Fatalf("part %d: %v is no offload store of medium CPU", i, s)
			}
			got = append(got, s.GetBlockHashes()...)
		}
	}
	if len(parts) < 2 || !slices.Equal(got, hashes) {
		t.Fatalf("%d parts holding %d of %d hashes in order", len(parts), len(got), len(hashes))
	}
}

// TestDecodeOffloadStores: which token-less BlockStored events are offload
// stores. Host and disk tiers are, in both encodings and with vLLM's later
// block_size 0; a parent, which vLLM does not send, is dropped. A device
// store without tokens is still demoted (the engine table is built from
// device tokens), as is an offload store without hashes or with a block
// size out of bounds.
func TestDecodeOffloadStores(t *testing.T) {
	p := mp(t, []any{1.0, []any{
		map[string]any{"type": "BlockStored", "block_hashes": []any{hA, hB}, "parent_block_hash": nil, "token_ids": []any{}, "block_size": 16, "lora_id": nil, "medium": "CPU", "lora_name": nil},
		[]any{"BlockStored", []any{hA}, nil, []any{}, 0, nil, "CPU_PINNED"},
		[]any{"BlockStored", []any{hA}, hB, []any{}, 16, nil, "STORAGE"},
		[]any{"BlockStored", []any{hA}, nil, []any{}, 16, nil, "GPU"},
		[]any{"BlockStored", []any{hA}, nil, []any{}, 16},
		[]any{"BlockStored", []any{}, nil, []any{}, 16, nil, "CPU"},
		[]any{"BlockStored", []any{hA}, nil, []any{}, 1 << 20, nil, "CPU"},
		[]any{"BlockStored", []any{hA}, nil, []any{}, -1, nil, "CPU"},
	}, 0})
	b := mustDecode(t, p, pb.Engine_ENGINE_VLLM)
	for i, want := range []pb.Tier{pb.Tier_TIER_HOST, pb.Tier_TIER_HOST, pb.Tier_TIER_DISK} {
		s := b.Events[i].GetStored()
		if s == nil || s.GetTier() != want || !events.IsOffloadStore(s) || s.ParentBlockHash != nil {
			t.Fatalf("event %d decoded as %v; want an offload store of tier %v without a parent", i, b.Events[i], want)
		}
	}
	if n := len(b.Events[0].GetStored().GetBlockHashes()); n != 2 {
		t.Fatalf("map offload store has %d hashes, want 2", n)
	}
	want := []Demotion{{3, TagBlockStored, DemoteTokenCount}, {4, TagBlockStored, DemoteTokenCount}, {5, TagBlockStored, DemoteNoHashes},
		{6, TagBlockStored, DemoteBlockSize}, {7, TagBlockStored, DemoteBlockSize}}
	if !slices.Equal(b.Demoted, want) {
		t.Fatalf("demoted %+v, want %+v", b.Demoted, want)
	}
	rec := &pb.KvEventRecord{Worker: &pb.WorkerRef{WorkerId: "w"}, EventTimeUnixNano: 1, Events: b.Events}
	if err := events.Validate(rec); err != nil {
		t.Fatalf("the decoded batch is no valid record: %v", err)
	}
}
