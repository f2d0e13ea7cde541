package sim

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/ingest"
	"github.com/pdrouter/pdrouter/kvhash"
)

const vectorsFile = "../testdata/kv-events/vectors.json"

// TestEncodeBatchVectors: the encoder produces, byte for byte, the shared test vectors
// of vLLM's map (≥ v0.24) and positional (v0.22/v0.23) batches.
func TestEncodeBatchVectors(t *testing.T) {
	raw, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var vf struct {
		Msgpack map[string]struct {
			Hex string `json:"hex"`
		} `json:"msgpack"`
	}
	if err := json.Unmarshal(raw, &vf); err != nil {
		t.Fatal(err)
	}
	const hA, hB = uint64(3236607068019569386), uint64(2758186210834249151)
	t1, t2 := make([]uint32, 16), make([]uint32, 16)
	for i := range 16 {
		t1[i], t2[i] = uint32(i+1), uint32(i+17)
	}
	root := KVEvent{Kind: BlockStored, Hashes: []uint64{hA}, Tokens: t1, BlockSize: 16}
	child := KVEvent{Kind: BlockStored, Hashes: []uint64{hB}, Parent: hA, HasParent: true, Tokens: t2, BlockSize: 16}
	// A GPU store, the CPU tier's store of its blocks and of one more (hosttier.go),
	// and a GPU eviction.
	offload := []KVEvent{
		{Kind: BlockStored, Hashes: []uint64{hA, hB}, Tokens: append(slices.Clone(t1), t2...), BlockSize: 16},
		{Kind: BlockStored, Hashes: []uint64{hA, hB, 0xff01}, BlockSize: 16, Medium: MediumCPU},
		{Kind: BlockRemoved, Hashes: []uint64{hB}},
	}
	cases := []struct {
		name string
		ts   float64
		evs  []KVEvent
		f    WireFormat
	}{
		{"positional_BlockStored_batch", 1757500000.25, []KVEvent{root}, WirePositional},
		{"positional_BlockRemoved_batch", 1757500001.5, []KVEvent{{Kind: BlockRemoved, Hashes: []uint64{hA, hB}}}, WirePositional},
		{"positional_AllBlocksCleared_batch", 1757500002.0, []KVEvent{{Kind: AllBlocksCleared}}, WirePositional},
		{"map_BlockStored_batch", 1757500000.25, []KVEvent{root}, WireMap},
		{"map_BlockStored_child_batch", 1757500000.5, []KVEvent{child}, WireMap},
		{"map_BlockRemoved_batch", 1757500001.5, []KVEvent{{Kind: BlockRemoved, Hashes: []uint64{hB, hA}}}, WireMap},
		{"map_AllBlocksCleared_batch", 1757500002.0, []KVEvent{{Kind: AllBlocksCleared}}, WireMap},
		{"positional_offload_CPU_batch", 1757500004.0, offload, WirePositional},
		{"map_offload_CPU_batch", 1757500004.0, offload, WireMap},
	}
	for _, c := range cases {
		want, ok := vf.Msgpack[c.name]
		if !ok {
			t.Errorf("%s: not in %s", c.name, vectorsFile)
			continue
		}
		got := hex.EncodeToString(EncodeBatch(c.ts, c.evs, 0, c.f))
		if got != want.Hex {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, want.Hex)
		}
	}
}

// TestPublisherOverZMQ: a simulated engine serves requests and publishes its KV events
// on a real ZMQ PUB socket; a zmq4 SUB receives every message, ingest's own parser
// and decoder read it, the seqs count up from 0, and the stored blocks carry exactly
// the engine's cached tokens and hashes (the router's hash of the token ids gives
// back the engine's cache keys). Then the replay ROUTER serves the buffered batches
// and the end marker to a DEALER, as ingest's replayer asks for them.
func TestPublisherOverZMQ(t *testing.T) {
	for _, f := range []WireFormat{WireMap, WirePositional} {
		t.Run(f.String(), func(t *testing.T) { testPublisher(t, f) })
	}
}

func testPublisher(t *testing.T, format WireFormat) {
	pub, err := StartPublisher(PublisherConfig{ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv@sim@m", Format: format, BufferSteps: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := zmq4.NewSub(ctx, zmq4.WithLogger(zmqLog))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, "kv@"); err != nil {
		t.Fatal(err)
	}
	if err := sub.Dial(pub.Endpoint()); err != nil {
		t.Fatal(err)
	}
	// PUB drops messages until the subscription has propagated (the slow joiner):
	// publish a probe until one arrives. Probes are AllBlocksCleared batches.
	probes := 0
	got := make(chan zmq4.Msg, 1024)
	go func() {
		for {
			m, err := sub.Recv()
			if err != nil {
				close(got)
				return
			}
			got <- m
		}
	}()
	var first ingest.Message
probe:
	for {
		if _, _, err := pub.Publish(offlineEpoch, []KVEvent{{Kind: AllBlocksCleared}}); err != nil {
			t.Fatal(err)
		}
		probes++
		select {
		case m := <-got:
			if first, err = ingest.ParseLive(m.Frames); err != nil {
				t.Fatal(err)
			}
			break probe
		case <-time.After(50 * time.Millisecond):
		}
	}
	// Drain the probes still in flight.
	lastSeq := first.Seq
	for lastSeq < uint64(probes-1) {
		m, _ := ingest.ParseLive((<-got).Frames)
		lastSeq = m.Seq
	}

	// A small engine serving three requests publishes through the fleet's hook.
	rec := &pubRecorder{recorder: recorder{q: &eventQueue{}, first: map[string]simTime{}, firstStep: map[string]int{}, done: map[string]simTime{}}, pub: pub}
	e, err := newEngine(EngineConfig{ID: "decode-0", Pool: PoolDecode, Model: "m", BlockSize: 16, NumBlocks: 12,
		MaxBatchedTokens: 64, MaxNumSeqs: 8, Seed: 5}, NewTiming(DefaultHardware()), rec.q, rec)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range []*Request{segReq("a", 20, Segment{Seed: 1, Len: 100}), segReq("b", 4, Segment{Seed: 1, Len: 64}, Segment{Seed: 2, Len: 40}), segReq("c", 2, Segment{Seed: 3, Len: 150})} {
		r.Arrival = time.Duration(i) * time.Second
		rec.q.at(r.Arrival, func() { e.submit(r, kindLocal, r.Tokens()); e.kick() })
	}
	runQueue(rec.q)
	if rec.batches == 0 {
		t.Fatal("engine published nothing")
	}
	// Receive every batch the engine published; mirror the engine's cache from them.
	cache := map[uint64]uint64{} // engine hash → router chain hash
	var stored, removed int
	var seqs []uint64
	for len(seqs) < rec.batches {
		var m zmq4.Msg
		select {
		case m = <-got:
		case <-ctx.Done():
			t.Fatalf("received %d of %d batches", len(seqs), rec.batches)
		}
		msg, err := ingest.ParseLive(m.Frames)
		if err != nil {
			t.Fatal(err)
		}
		if string(msg.Topic) != "kv@sim@m" {
			t.Errorf("topic %q", msg.Topic)
		}
		seqs = append(seqs, msg.Seq)
		b, err := ingest.DecodeBatch(msg.Payload, pb.Engine_ENGINE_SIM)
		if err != nil {
			t.Fatalf("seq %d: %v", msg.Seq, err)
		}
		if want := map[WireFormat]string{WireMap: ingest.EncodingMap, WirePositional: ingest.EncodingPositional}[format]; b.Encoding != want {
			t.Errorf("seq %d: encoding %q, want %q", msg.Seq, b.Encoding, want)
		}
		if !b.HasDPRank || b.DPRank != 0 || b.TimeUnixNano < int64(offlineEpoch*1e9) {
			t.Errorf("seq %d: rank %v/%d ts %d", msg.Seq, b.HasDPRank, b.DPRank, b.TimeUnixNano)
		}
		for _, ev := range b.Events {
			switch {
			case ev.GetStored() != nil:
				s := ev.GetStored()
				if s.GetBlockSize() != 16 || len(s.GetTokenIds()) != 16*len(s.GetBlockHashes()) || s.GetMedium() != "GPU" {
					t.Fatalf("stored %v", s)
				}
				var parent uint64
				hasParent := s.ParentBlockHash != nil
				if hasParent {
					if parent, hasParent = cache[s.GetParentBlockHash()]; !hasParent {
						t.Fatalf("stored block's parent %x was never announced", s.GetParentBlockHash())
					}
				}
				chain := kvhash.Chain(nil, s.GetTokenIds(), 16, parent, hasParent)
				for i, h := range s.GetBlockHashes() {
					if h != e.pool.EngineHash(chain[i]) {
						t.Fatalf("engine hash %x does not name the tokens it carries", h)
					}
					cache[h] = chain[i]
				}
				stored += len(s.GetBlockHashes())
			case ev.GetRemoved() != nil:
				for _, h := range ev.GetRemoved().GetBlockHashes() {
					if _, ok := cache[h]; !ok {
						t.Fatalf("removed block %x was never stored", h)
					}
					delete(cache, h)
				}
				removed += len(ev.GetRemoved().GetBlockHashes())
			}
		}
	}
	for i, s := range seqs {
		if s != uint64(probes+i) {
			t.Fatalf("seqs %v: want consecutive from %d", seqs, probes)
		}
	}
	if removed == 0 {
		t.Error("a 12-block cache evicted nothing")
	}
	var want []uint64
	for h := range cache {
		want = append(want, h)
	}
	have := e.pool.CachedChainHashes()
	var wantChain []uint64
	for _, h := range want {
		wantChain = append(wantChain, cache[h])
	}
	slices.Sort(have)
	slices.Sort(wantChain)
	if !slices.Equal(have, wantChain) {
		t.Errorf("cache mirrored from events (%d blocks) differs from the engine's (%d)", len(wantChain), len(have))
	}
	t.Logf("%s: %d batches, %d blocks stored, %d removed, %d cached", format, len(seqs), stored, removed, len(have))

	// Replay from the first engine batch: every buffered batch from there, then the end.
	var replayed []ingest.Message
	from := uint64(probes)
	err = ingest.ZMQReplayer{}.Replay(ctx, pub.ReplayEndpoint(), from, 10*time.Second, func(m ingest.Message) bool {
		replayed = append(replayed, m)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(replayed) != rec.batches || replayed[0].Seq != from || string(replayed[0].Topic) != "kv@sim@m" {
		t.Fatalf("replay returned %d batches from seq %v, want %d from %d", len(replayed), replayed[0].Seq, rec.batches, from)
	}
	for i, m := range replayed {
		if !bytes.Equal(m.Payload, rec.payloads[i]) {
			t.Errorf("replayed seq %d differs from the live batch", m.Seq)
		}
	}
	// A replay past the end returns just the end marker.
	n := 0
	if err := (ingest.ZMQReplayer{}).Replay(ctx, pub.ReplayEndpoint(), 1<<40, 5*time.Second, func(ingest.Message) bool { n++; return true }); err != nil || n != 0 {
		t.Errorf("replay past the end: %d batches, err %v", n, err)
	}
}

// pubRecorder publishes each step's events, as the fleet does.
type pubRecorder struct {
	recorder
	pub      *Publisher
	batches  int
	payloads [][]byte
}

func (r *pubRecorder) stepDone(e *Engine, evs []KVEvent) {
	if len(evs) == 0 {
		return
	}
	ts := offlineEpoch + r.q.now.Seconds()
	if _, _, err := r.pub.Publish(ts, evs); err != nil {
		panic(err)
	}
	r.payloads = append(r.payloads, EncodeBatch(ts, evs, 0, r.pub.cfg.Format))
	r.batches++
}
