package ingest

import (
	"encoding/hex"
	"errors"
	"math"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/proto"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

func mp(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ints(from, n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

func mustDecode(t *testing.T, p []byte, eng pb.Engine) *Batch {
	t.Helper()
	b, err := DecodeBatch(p, eng)
	if err != nil {
		t.Fatalf("DecodeBatch(%x): %v", p, err)
	}
	return b
}

func TestDecodeUnknownTagsAndFieldsPassThrough(t *testing.T) {
	p := mp(t, []any{1757500000.25, []any{
		[]any{"BlockInactive", []any{hA}, "GPU"},
		map[string]any{"block_hashes": []any{hA}}, // map without "type"
		map[string]any{"type": "BlockRemoved", "block_hashes": []any{hA}, "remaining_copy_counts": []any{1}, "ownership": "x"},
		map[string]any{"type": "BlockInactive", "block_hashes": "not-an-array"}, // unknown tag: fields not read
	}, 0})
	b := mustDecode(t, p, pb.Engine_ENGINE_VLLM)
	want := []*pb.KvEvent{
		unknown("BlockInactive"),
		unknown(""),
		removed(&pb.BlockRemoved{BlockHashes: []uint64{hA}, Tier: pb.Tier_TIER_DEVICE}),
		unknown("BlockInactive"),
	}
	batchEqual(t, "unknown", b, &Batch{TimeUnixNano: 1757500000250000000, HasDPRank: true, Encoding: EncodingMixed, Events: want})
}

func TestDecodeHashRepresentations(t *testing.T) {
	digest, _ := hex.DecodeString("202da172482d928bbc42ab25b0151e2b895f13f41002e27b2ceabcfae6d332ea")
	p := mp(t, []any{1.5, []any{
		[]any{"BlockRemoved", []any{int64(-2), uint64(hA), digest, uint8(7), int8(-1), "abcdefgh"}},
	}})
	b := mustDecode(t, p, pb.Engine_ENGINE_SGLANG)
	got := b.Events[0].GetRemoved().GetBlockHashes()
	want := []uint64{0xfffffffffffffffe, hA, hA, 7, ^uint64(0), 0x6162636465666768}
	if len(got) != len(want) {
		t.Fatalf("hashes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("hash %d = %x, want %x", i, got[i], want[i])
		}
	}
	// Negative parent, negative fixint in hashes (the doc's "-2 encoded fe").
	p = mp(t, []any{1.5, []any{[]any{"BlockStored", []any{int8(-2)}, int64(-5), ints(0, 4), 4, nil}}})
	s := mustDecode(t, p, pb.Engine_ENGINE_SGLANG).Events[0].GetStored()
	if s.GetBlockHashes()[0] != 0xfffffffffffffffe || s.GetParentBlockHash() != uint64(0xfffffffffffffffb) {
		t.Errorf("negative hashes: %v", s)
	}
}

func TestDecodeSGLang(t *testing.T) {
	// attn_dp_rank 3, CPU_PINNED medium, a BlockStoredWithMetadata whose
	// trailing element is metadata, and an early 5-element BlockStored.
	p := mp(t, []any{1757500000.0, []any{
		[]any{"BlockStored", []any{int64(-9), int64(10)}, nil, ints(1, 8), 4, nil, "CPU_PINNED", "lora-a", []any{nil, nil}},
		[]any{"BlockStoredWithMetadata", []any{int64(11)}, int64(10), ints(9, 4), 4, nil, "DISK", nil, []any{nil}, map[string]any{"cache_salt": "s"}},
		[]any{"BlockStored", []any{int64(12)}, int64(11), ints(13, 4), 4},
		[]any{"BlockRemoved", []any{int64(12)}, "EXTERNAL"},
		map[string]any{"type": "BlockStored", "block_hashes": []any{int64(13)}, "token_ids": ints(0, 4), "block_size": 4, "medium": "GPU", "cache_salt": "x", "session_id": "s1"},
	}, 3})
	b := mustDecode(t, p, pb.Engine_ENGINE_SGLANG)
	if !b.HasDPRank || b.DPRank != 3 {
		t.Errorf("attn_dp_rank = %d/%v, want 3", b.DPRank, b.HasDPRank)
	}
	ten := uint64(10)
	eleven := uint64(11)
	want := []*pb.KvEvent{
		stored(&pb.BlockStored{BlockHashes: []uint64{uint64(0xfffffffffffffff7), 10}, TokenIds: seqTokens(1, 8), BlockSize: 4, Medium: "CPU_PINNED", Tier: pb.Tier_TIER_HOST, LoraName: "lora-a"}),
		stored(&pb.BlockStored{BlockHashes: []uint64{11}, ParentBlockHash: &ten, TokenIds: seqTokens(9, 4), BlockSize: 4, Medium: "DISK", Tier: pb.Tier_TIER_DISK}),
		stored(&pb.BlockStored{BlockHashes: []uint64{12}, ParentBlockHash: &eleven, TokenIds: seqTokens(13, 4), BlockSize: 4, Tier: pb.Tier_TIER_DEVICE}),
		removed(&pb.BlockRemoved{BlockHashes: []uint64{12}, Medium: "EXTERNAL", Tier: pb.Tier_TIER_DISK}),
		stored(&pb.BlockStored{BlockHashes: []uint64{13}, TokenIds: seqTokens(0, 4), BlockSize: 4, Medium: "GPU", Tier: pb.Tier_TIER_DEVICE}),
	}
	batchEqual(t, "sglang", b, &Batch{TimeUnixNano: 1757500000000000000, DPRank: 3, HasDPRank: true, Encoding: EncodingMixed, Events: want})
}

func TestDecodePositionalVintages(t *testing.T) {
	// One BlockStored per vLLM vintage length (6, 7, 8, 9, 10, 12) and a
	// future longer one: fields by index, trailing ones optional.
	base := []any{"BlockStored", []any{hA}, nil, ints(1, 16), 16, 5}
	full := append(append([]any{}, base...), "CPU", "lora", []any{nil}, 2, "full_attention", nil, "LOCAL", nil, "sess")
	for _, n := range []int{6, 7, 8, 9, 10, 12, 15} {
		b := mustDecode(t, mp(t, []any{1.0, []any{full[:n]}, 0}), pb.Engine_ENGINE_VLLM)
		s := b.Events[0].GetStored()
		if s == nil || s.GetLoraId() != 5 || len(s.GetTokenIds()) != 16 {
			t.Fatalf("len %d: %v", n, b.Events[0])
		}
		if (n >= 7) != (s.GetMedium() == "CPU") || (n >= 8) != (s.GetLoraName() == "lora") || (n >= 10) != (s.GroupIdx != nil) {
			t.Errorf("len %d: %v", n, s)
		}
		if n >= 7 && s.GetTier() != pb.Tier_TIER_HOST {
			t.Errorf("len %d: tier %v", n, s.GetTier())
		}
	}
}

func TestDecodeDemotions(t *testing.T) {
	p := mp(t, []any{1.0, []any{
		[]any{"BlockStored", []any{hA, hB}, nil, ints(1, 16), 16}, // 16 tokens for 2 blocks
		[]any{"BlockStored", []any{}, nil, []any{}, 16},
		[]any{"BlockStored", []any{hA}, nil, ints(1, 16), 0},
		[]any{"BlockStored", []any{hA}, nil, append(ints(1, 15), -1), 16},
		[]any{"BlockStored", []any{hA}, nil, ints(1, 1), nil},
		[]any{"BlockRemoved", []any{}},
		[]any{"BlockStored", []any{hA}, nil, ints(1, 16), 16}, // fine
	}, 0})
	b := mustDecode(t, p, pb.Engine_ENGINE_VLLM)
	wantReasons := []string{DemoteTokenCount, DemoteNoHashes, DemoteBlockSize, DemoteTokenRange, DemoteBlockSize, DemoteNoHashes}
	if len(b.Demoted) != len(wantReasons) {
		t.Fatalf("demoted %v", b.Demoted)
	}
	for i, r := range wantReasons {
		if b.Demoted[i].Reason != r || b.Demoted[i].Event != i {
			t.Errorf("demotion %d = %+v, want reason %s", i, b.Demoted[i], r)
		}
		if b.Events[i].GetUnknown() == nil {
			t.Errorf("event %d not demoted: %v", i, b.Events[i])
		}
	}
	if b.Events[6].GetStored() == nil {
		t.Errorf("event 6 should stay a BlockStored: %v", b.Events[6])
	}
}

func TestDecodeBatchShapes(t *testing.T) {
	// A 4th batch element is ignored; a nil rank is no rank; nil ts is 0.
	b := mustDecode(t, mp(t, []any{1.0, []any{[]any{"AllBlocksCleared"}}, 2, "future"}), pb.Engine_ENGINE_VLLM)
	if b.DPRank != 2 || !b.HasDPRank || !proto.Equal(b.Events[0], cleared()) {
		t.Errorf("4-element batch: %+v", b)
	}
	b = mustDecode(t, mp(t, []any{nil, []any{}, nil}), pb.Engine_ENGINE_VLLM)
	if b.HasDPRank || b.TimeUnixNano != 0 || len(b.Events) != 0 || b.Encoding != "" {
		t.Errorf("nil rank: %+v", b)
	}
	b = mustDecode(t, mp(t, []any{float32(2.5), []any{}, uint64(1)}), pb.Engine_ENGINE_VLLM)
	if b.TimeUnixNano != 2500000000 {
		t.Errorf("float32 ts: %d", b.TimeUnixNano)
	}
	b = mustDecode(t, mp(t, []any{1757500000, []any{}}), pb.Engine_ENGINE_VLLM)
	if b.TimeUnixNano != 1757500000000000000 {
		t.Errorf("int ts: %d", b.TimeUnixNano)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := mp(t, []any{1.0, []any{[]any{"BlockStored", []any{hA}, nil, ints(1, 16), 16}}, 0})
	cases := []struct {
		name    string
		payload []byte
		reason  string
		event   int
		field   string
	}{
		{"empty", nil, ReasonTruncated, -1, ""},
		{"map batch without events", mp(t, map[string]any{"ts": 1}), ReasonBatchLength, -1, ""},
		{"string batch", mp(t, "batch"), ReasonNotArray, -1, ""},
		{"one element", mp(t, []any{1.0}), ReasonBatchLength, -1, ""},
		{"string ts", mp(t, []any{"now", []any{}}), ReasonTimestamp, -1, ""},
		{"negative ts", mp(t, []any{-1.0, []any{}}), ReasonTimestamp, -1, ""},
		{"ts past int64 nanoseconds", mp(t, []any{9.5e9, []any{}}), ReasonTimestamp, -1, ""},
		{"ts just past int64 nanoseconds", mp(t, []any{9.223372037e9, []any{}}), ReasonTimestamp, -1, ""},
		{"int ts past int64 nanoseconds", mp(t, []any{uint64(9_300_000_000), []any{}}), ReasonTimestamp, -1, ""},
		{"ts beyond year 2100", mp(t, []any{4.2e9, []any{}}), ReasonTimestamp, -1, ""},
		{"NaN ts", mp(t, []any{math.NaN(), []any{}}), ReasonTimestamp, -1, ""},
		{"infinite ts", mp(t, []any{math.Inf(1), []any{}}), ReasonTimestamp, -1, ""},
		{"events not array", mp(t, []any{1.0, map[string]any{}}), ReasonEvents, -1, ""},
		{"string rank", mp(t, []any{1.0, []any{}, "0"}), ReasonDPRank, -1, ""},
		{"negative rank", mp(t, []any{1.0, []any{}, -1}), ReasonDPRank, -1, ""},
		{"trailing", append(append([]byte{}, good...), 0xc0), ReasonTrailing, -1, ""},
		{"truncated", good[:len(good)-3], ReasonTruncated, 0, ""},
		{"event is int", mp(t, []any{1.0, []any{[]any{"AllBlocksCleared"}, 5}}), ReasonEventShape, 1, ""},
		{"empty positional", mp(t, []any{1.0, []any{[]any{}}}), ReasonTag, 0, ""},
		{"int tag", mp(t, []any{1.0, []any{[]any{1, 2}}}), ReasonTag, 0, ""},
		{"int type", mp(t, []any{1.0, []any{map[string]any{"type": 1}}}), ReasonTag, 0, ""},
		{"hashes not array", mp(t, []any{1.0, []any{[]any{"BlockRemoved", 5}}}), ReasonField, 0, "block_hashes"},
		{"float hash", mp(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1.5}}}}), ReasonField, 0, "block_hashes"},
		{"string token", mp(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{"a"}, 1}}}), ReasonField, 0, "token_ids"},
		{"int medium", mp(t, []any{1.0, []any{map[string]any{"type": "BlockRemoved", "block_hashes": []any{1}, "medium": 3}}}), ReasonField, 0, "medium"},
		{"huge group", mp(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1}, nil, int64(1) << 40}}}), ReasonField, 0, "group_idx"},
		{"bad code", []byte{0x92, 0x01, 0x91, 0xc1}, ReasonBadMsgpack, 0, ""},
		{"huge array header", []byte{0x92, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff}, ReasonTruncated, -1, ""},
		{"huge bin hash", []byte{0x92, 0x01, 0x91, 0x92, 0xac, 'B', 'l', 'o', 'c', 'k', 'R', 'e', 'm', 'o', 'v', 'e', 'd', 0x91, 0xc6, 0xff, 0xff, 0xff, 0xff}, ReasonTruncated, 0, ""},
	}
	deep := []byte{0x92, 0x01, 0x91}
	for i := 0; i < 100; i++ {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0xc0)
	cases = append(cases, struct {
		name    string
		payload []byte
		reason  string
		event   int
		field   string
	}{"too deep", deep, ReasonTooDeep, 0, ""})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := DecodeBatch(c.payload, pb.Engine_ENGINE_VLLM)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("got %+v, %v; want a *DecodeError", b, err)
			}
			if de.Reason != c.reason || de.Event != c.event || (c.field != "" && de.Field != c.field) {
				t.Errorf("error %q: reason %s event %d field %q; want %s %d %q", err, de.Reason, de.Event, de.Field, c.reason, c.event, c.field)
			}
			if ErrorReason(err) != c.reason {
				t.Errorf("ErrorReason = %s", ErrorReason(err))
			}
		})
	}
}

func TestDecodeErrorOffset(t *testing.T) {
	// The error names the byte where the bad hash starts.
	p := mp(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1, true}}}})
	_, err := DecodeBatch(p, pb.Engine_ENGINE_VLLM)
	var de *DecodeError
	if !errors.As(err, &de) || p[de.Offset] != 0xc3 {
		t.Fatalf("err %v: offset does not point at the bool (payload %x)", err, p)
	}
}

func TestParseReplayGenerations(t *testing.T) {
	payload := []byte{0x90}
	cases := []struct {
		name   string
		frames [][]byte
		topic  string
		seq    uint64
		end    bool
	}{
		{"old", [][]byte{{}, SeqFrame(7), payload}, "", 7, false},
		{"new", [][]byte{{}, []byte("kv@x"), SeqFrame(7), payload}, "kv@x", 7, false},
		{"new empty topic", [][]byte{{}, {}, SeqFrame(8), payload}, "", 8, false},
		{"old end", [][]byte{{}, SeqFrame(EndSeq), {}}, "", EndSeq, true},
		{"new end", [][]byte{{}, {}, SeqFrame(EndSeq), {}}, "", EndSeq, true},
		{"no delimiter", [][]byte{SeqFrame(9), payload}, "", 9, false},
	}
	for _, c := range cases {
		m, end, err := ParseReplay(c.frames)
		if err != nil || string(m.Topic) != c.topic || m.Seq != c.seq || end != c.end {
			t.Errorf("%s: %+v end=%v err=%v", c.name, m, end, err)
		}
	}
	for _, bad := range [][][]byte{nil, {{}}, {{}, {1, 2}, payload}, {{}, {}, {}, {}, {}}} {
		if _, _, err := ParseReplay(bad); err == nil {
			t.Errorf("ParseReplay(%x) accepted", bad)
		}
	}
	if _, err := ParseLive([][]byte{{}, SeqFrame(1)}); !errors.Is(err, ErrFrames) {
		t.Errorf("2-frame live: %v", err)
	}
	if _, err := ParseLive([][]byte{{}, {1}, payload}); !errors.Is(err, ErrSeqSize) {
		t.Errorf("short seq: %v", err)
	}
	m, err := ParseLive([][]byte{[]byte("t"), SeqFrame(258), payload})
	if err != nil || m.Seq != 258 || string(m.Topic) != "t" {
		t.Errorf("live: %+v %v", m, err)
	}
	if r := ReplayRequest(5); len(r) != 2 || len(r[0]) != 0 || string(r[1]) != string(SeqFrame(5)) {
		t.Errorf("ReplayRequest = %x", r)
	}
}

// TestDecodeMapBatch: a batch whose fields are keyed by name, as msgspec writes
// vLLM's EventBatch when the struct is not array_like (its source declares it
// so once its events are maps), decodes to the same batch as the positional
// [ts, events, dp_rank]; unknown keys are skipped, and a map without ts or
// events, or with a key twice, is refused.
func TestDecodeMapBatch(t *testing.T) {
	events := []any{
		map[string]any{"type": "BlockStored", "block_hashes": []any{hA}, "parent_block_hash": nil, "token_ids": ints(0, 4),
			"block_size": 4, "lora_id": nil, "medium": "GPU", "lora_name": nil},
		map[string]any{"type": "BlockRemoved", "block_hashes": []any{hA}, "medium": "GPU"},
	}
	want := mustDecode(t, mp(t, []any{1757500000.25, events, 3}), pb.Engine_ENGINE_VLLM)
	got := mustDecode(t, mp(t, map[string]any{"ts": 1757500000.25, "events": events, "data_parallel_rank": 3, "later": []any{1}}), pb.Engine_ENGINE_VLLM)
	batchEqual(t, "map batch", got, want)
	noRank := mustDecode(t, mp(t, map[string]any{"events": events, "ts": 1757500000.25}), pb.Engine_ENGINE_VLLM)
	if noRank.HasDPRank || len(noRank.Events) != 2 || noRank.TimeUnixNano != want.TimeUnixNano {
		t.Fatalf("map batch without a rank: %+v", noRank)
	}
	// A key twice: written by hand, since a Go map cannot hold it.
	twice := append([]byte{0x83}, mp(t, "ts")...)
	twice = append(twice, mp(t, 1.5)...)
	twice = append(twice, mp(t, "events")...)
	twice = append(twice, mp(t, []any{})...)
	twice = append(twice, mp(t, "ts")...)
	twice = append(twice, mp(t, 2.5)...)
	for name, p := range map[string][]byte{
		"no events":    mp(t, map[string]any{"ts": 1.5}),
		"no ts":        mp(t, map[string]any{"events": events}),
		"events a map": mp(t, map[string]any{"ts": 1.5, "events": map[string]any{}}),
		"ts twice":     twice,
	} {
		_, err := DecodeBatch(p, pb.Engine_ENGINE_VLLM)
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Errorf("%s: err %v, want a *DecodeError", name, err)
		}
	}
}
