package ingest

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// vectorsFile holds the byte-exact engine payloads that the decoder, the fleet
// simulator's encoder and the Python test publisher all check against.
const vectorsFile = "../testdata/kv-events/vectors.json"

type vectorFile struct {
	Msgpack map[string]struct {
		Hex     string          `json:"hex"`
		Decoded json.RawMessage `json:"decoded"`
	} `json:"msgpack"`
	Hashes map[string]json.RawMessage `json:"-"`
}

func loadVectors(t testing.TB) (map[string][]byte, map[string]json.RawMessage) {
	t.Helper()
	raw, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(raw, &vf); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for name, v := range vf.Msgpack {
		b, err := hex.DecodeString(v.Hex)
		if err != nil {
			t.Fatalf("vector %s: %v", name, err)
		}
		out[name] = b
	}
	return out, top
}

const (
	hA = uint64(3236607068019569386)
	hB = uint64(2758186210834249151)
	// hUnseen is a hash no GPU store of the vectors names.
	hUnseen = uint64(0xff01)
)

func u64p(v uint64) *uint64 { return &v }
func i32p(v int32) *int32   { return &v }

func seqTokens(from, n uint32) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = from + uint32(i)
	}
	return t
}

func stored(s *pb.BlockStored) *pb.KvEvent { return &pb.KvEvent{Event: &pb.KvEvent_Stored{Stored: s}} }
func removed(r *pb.BlockRemoved) *pb.KvEvent {
	return &pb.KvEvent{Event: &pb.KvEvent_Removed{Removed: r}}
}
func cleared() *pb.KvEvent {
	return &pb.KvEvent{Event: &pb.KvEvent_Cleared{Cleared: &pb.AllBlocksCleared{}}}
}

// vectorCase is one payload vector and the batch it must decode to.
type vectorCase struct {
	name string
	want *Batch
}

// payloadVectors lists every msgpack payload of vectors.json with its
// expected normalized batch (written from the doc's decoded forms, not from
// this decoder's output).
func payloadVectors() []vectorCase {
	gpu := func(s *pb.BlockStored) *pb.BlockStored {
		s.Medium, s.Tier = "GPU", pb.Tier_TIER_DEVICE
		return s
	}
	return []vectorCase{
		{"positional_BlockStored_batch", &Batch{TimeUnixNano: 1757500000250000000, HasDPRank: true, Encoding: EncodingPositional,
			Events: []*pb.KvEvent{stored(gpu(&pb.BlockStored{BlockHashes: []uint64{hA}, TokenIds: seqTokens(1, 16), BlockSize: 16, GroupIdx: i32p(0)}))}}},
		{"positional_BlockRemoved_batch", &Batch{TimeUnixNano: 1757500001500000000, HasDPRank: true, Encoding: EncodingPositional,
			Events: []*pb.KvEvent{removed(&pb.BlockRemoved{BlockHashes: []uint64{hA, hB}, Medium: "GPU", Tier: pb.Tier_TIER_DEVICE, GroupIdx: i32p(0)})}}},
		{"positional_AllBlocksCleared_batch", &Batch{TimeUnixNano: 1757500002000000000, HasDPRank: true, Encoding: EncodingPositional,
			Events: []*pb.KvEvent{cleared()}}},
		{"map_BlockStored_batch", &Batch{TimeUnixNano: 1757500000250000000, HasDPRank: true, Encoding: EncodingMap,
			Events: []*pb.KvEvent{stored(gpu(&pb.BlockStored{BlockHashes: []uint64{hA}, TokenIds: seqTokens(1, 16), BlockSize: 16, GroupIdx: i32p(0)}))}}},
		{"map_BlockStored_child_batch", &Batch{TimeUnixNano: 1757500000500000000, HasDPRank: true, Encoding: EncodingMap,
			Events: []*pb.KvEvent{stored(gpu(&pb.BlockStored{BlockHashes: []uint64{hB}, ParentBlockHash: u64p(hA), TokenIds: seqTokens(17, 16), BlockSize: 16, GroupIdx: i32p(0)}))}}},
		{"map_BlockRemoved_batch", &Batch{TimeUnixNano: 1757500001500000000, HasDPRank: true, Encoding: EncodingMap,
			Events: []*pb.KvEvent{removed(&pb.BlockRemoved{BlockHashes: []uint64{hB, hA}, Medium: "GPU", Tier: pb.Tier_TIER_DEVICE, GroupIdx: i32p(0)})}}},
		{"map_AllBlocksCleared_batch", &Batch{TimeUnixNano: 1757500002000000000, HasDPRank: true, Encoding: EncodingMap,
			Events: []*pb.KvEvent{cleared()}}},
		{"map_BlockRemoved_bytes_hash_batch", &Batch{TimeUnixNano: 1757500003000000000, HasDPRank: true, Encoding: EncodingMap,
			Events: []*pb.KvEvent{removed(&pb.BlockRemoved{BlockHashes: []uint64{hA}, Medium: "GPU", Tier: pb.Tier_TIER_DEVICE, GroupIdx: i32p(0)})}}},
		{"positional_offload_CPU_batch", offloadVector(EncodingPositional)},
		{"map_offload_CPU_batch", offloadVector(EncodingMap)},
		{"v0.9_positional_2elem_batch", &Batch{TimeUnixNano: 1757500000250000000, Encoding: EncodingPositional,
			Events: []*pb.KvEvent{
				stored(&pb.BlockStored{BlockHashes: []uint64{hA}, TokenIds: seqTokens(1, 16), BlockSize: 16, Tier: pb.Tier_TIER_DEVICE}),
				removed(&pb.BlockRemoved{BlockHashes: []uint64{hA}, Tier: pb.Tier_TIER_DEVICE}),
			}}},
	}
}

// offloadVector is the batch of the offload vectors: a GPU store of two
// blocks, vLLM's OffloadingConnector's CPU store of them and of one hash the
// GPU never announced (no tokens, no parent), and the GPU's eviction of the
// second block.
func offloadVector(enc string) *Batch {
	return &Batch{TimeUnixNano: 1757500004000000000, HasDPRank: true, Encoding: enc, Events: []*pb.KvEvent{
		stored(&pb.BlockStored{BlockHashes: []uint64{hA, hB}, TokenIds: seqTokens(1, 32), BlockSize: 16, Medium: "GPU", Tier: pb.Tier_TIER_DEVICE, GroupIdx: i32p(0)}),
		stored(&pb.BlockStored{BlockHashes: []uint64{hA, hB, hUnseen}, BlockSize: 16, Medium: "CPU", Tier: pb.Tier_TIER_HOST}),
		removed(&pb.BlockRemoved{BlockHashes: []uint64{hB}, Medium: "GPU", Tier: pb.Tier_TIER_DEVICE, GroupIdx: i32p(0)}),
	}}
}

// frameVectors are the vectors that are ZMQ frames, not payloads.
var frameVectors = map[string]uint64{
	"zmq_seq_frame_for_seq_0":   0,
	"zmq_seq_frame_for_seq_258": 258,
	"replay_END_SEQ":            EndSeq,
}

func batchEqual(t *testing.T, name string, got, want *Batch) {
	t.Helper()
	if got.TimeUnixNano != want.TimeUnixNano || got.DPRank != want.DPRank || got.HasDPRank != want.HasDPRank || got.Encoding != want.Encoding {
		t.Errorf("%s: header = {ts %d rank %d/%v enc %q}, want {ts %d rank %d/%v enc %q}", name,
			got.TimeUnixNano, got.DPRank, got.HasDPRank, got.Encoding, want.TimeUnixNano, want.DPRank, want.HasDPRank, want.Encoding)
	}
	if len(got.Events) != len(want.Events) {
		t.Fatalf("%s: %d events, want %d", name, len(got.Events), len(want.Events))
	}
	for i := range got.Events {
		if !proto.Equal(got.Events[i], want.Events[i]) {
			t.Errorf("%s: event %d =\n  %v\nwant\n  %v", name, i, got.Events[i], want.Events[i])
		}
	}
	if len(got.Demoted) != len(want.Demoted) {
		t.Errorf("%s: demoted %v, want %v", name, got.Demoted, want.Demoted)
	}
}

// TestVectorsDecode decodes every payload of vectors.json, with each
// engine's conventions (TensorRT-LLM's stream is vLLM-compatible, and these
// shapes are also SGLang's), and fails on a vector that has no expectation.
func TestVectorsDecode(t *testing.T) {
	payloads, _ := loadVectors(t)
	covered := map[string]bool{}
	for _, vc := range payloadVectors() {
		p, ok := payloads[vc.name]
		if !ok {
			t.Errorf("vector %s missing from %s", vc.name, vectorsFile)
			continue
		}
		covered[vc.name] = true
		for _, eng := range []pb.Engine{pb.Engine_ENGINE_VLLM, pb.Engine_ENGINE_TRTLLM, pb.Engine_ENGINE_SGLANG} {
			got, err := DecodeBatch(p, eng)
			if err != nil {
				t.Errorf("%s/%v: %v", vc.name, eng, err)
				continue
			}
			want := vc.want
			if eng == pb.Engine_ENGINE_SGLANG {
				want = sglangView(vc.want)
			}
			batchEqual(t, vc.name+"/"+eng.String(), got, want)
		}
	}
	for name, p := range payloads {
		if seq, ok := frameVectors[name]; ok {
			covered[name] = true
			got, err := ParseSeq(p)
			if err != nil || got != seq {
				t.Errorf("%s: ParseSeq = %d, %v; want %d", name, got, err, seq)
			}
			if !bytes.Equal(SeqFrame(seq), p) {
				t.Errorf("%s: SeqFrame(%d) = %x, want %x", name, seq, SeqFrame(seq), p)
			}
		}
	}
	var missing []string
	for name := range payloads {
		if !covered[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("vectors without a test: %v", missing)
	}
}

// sglangView is what the SGLang layout reads from a vLLM-shaped positional
// payload: SGLang has no group_idx at index 9 (map events are read by key,
// so they keep it).
func sglangView(b *Batch) *Batch {
	if b.Encoding != EncodingPositional {
		return b
	}
	c := *b
	c.Events = nil
	for _, e := range b.Events {
		e = proto.Clone(e).(*pb.KvEvent)
		if s := e.GetStored(); s != nil {
			s.GroupIdx = nil
		}
		c.Events = append(c.Events, e)
	}
	// BlockRemoved index 3 is group_idx in vLLM only.
	for _, e := range c.Events {
		if r := e.GetRemoved(); r != nil {
			r.GroupIdx = nil
		}
	}
	return &c
}

// TestVectorHashes checks the hash normalization against the hash chain of
// vectors.json: the published int is the last 8 digest bytes, big-endian,
// including a value >= 2^63.
func TestVectorHashes(t *testing.T) {
	_, top := loadVectors(t)
	for _, pair := range [][2]string{{"block1_sha256", "block1_int64"}, {"block2_sha256", "block2_int64"}, {"block1_lora_sha256", "block1_lora_int64"}} {
		var digestHex string
		var want uint64
		if err := json.Unmarshal(top[pair[0]], &digestHex); err != nil {
			t.Fatalf("%s: %v", pair[0], err)
		}
		if err := json.Unmarshal(top[pair[1]], &want); err != nil {
			t.Fatalf("%s: %v", pair[1], err)
		}
		d, err := hex.DecodeString(digestHex)
		if err != nil {
			t.Fatal(err)
		}
		if got := HashFromBytes(d); got != want {
			t.Errorf("HashFromBytes(%s) = %d, want %s = %d", pair[0], got, pair[1], want)
		}
	}
	if HashFromInt(-2) != 0xfffffffffffffffe {
		t.Errorf("HashFromInt(-2) = %x", HashFromInt(-2))
	}
}
