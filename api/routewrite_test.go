package api

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/replay"
)

// TestRouteJSONMatchesEncodingJSON: the hand-written route body is
// byte-identical to encoding/json's on random responses, strings with
// every kind of character that needs escaping and floats of every
// magnitude included.
func TestRouteJSONMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", "Z9", " ", "\"", "\\", "/", "<", ">", "&", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f",
		"é", "日本", "\u2028", "\u2029", "😀", "\xff", "\xe2\x80", "\xc3", "\U0010ffff", "\ufffd"}
	str := func() string {
		var b []byte
		for range rng.IntN(6) {
			b = append(b, pieces[rng.IntN(len(pieces))]...)
		}
		return string(b)
	}
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 0.1808, 1.0 / 3, 1e-6, 9.99e-7, 1e-7, 1.5e-9, 5e-324,
		1e20, 1e21, 1.2345e21, 1e-300, 123456789.125, -2.5e-8, math.MaxFloat64, 12.5}
	flt := func() float64 {
		if rng.IntN(2) == 0 {
			return floats[rng.IntN(len(floats))]
		}
		return math.Float64frombits(rng.Uint64())
	}
	for i := range 20000 {
		wm := &pb.Watermark{}
		for range rng.IntN(4) {
			to := &pb.TopicOffsets{Topic: []string{"kv-events", "load", "workers", "decisions", "outcomes"}[rng.IntN(5)]}
			for range rng.IntN(13) {
				to.Partitions = append(to.Partitions, &pb.PartitionOffset{Partition: rng.Int32N(20), Offset: rng.Int64()})
			}
			wm.Topics = append(wm.Topics, to)
		}
		r := routeResponse{RequestID: str(), DecisionID: str(), Mode: str(), DecodeWorker: str(), Reason: str(), Policy: str(),
			PromptTokens: rng.Uint32(), CachedTokens: rng.Uint32(), EffectiveISL: rng.Uint32(), EffectiveISLRatio: flt(),
			ConfigHash: str(), DecidedBy: str(), Distance: flt(), Idempotent: rng.IntN(2) == 0}
		if rng.IntN(2) == 0 {
			p := str()
			r.PrefillWorker = &p
		}
		var s Server
		got, ok := appendRouteJSON(nil, &r, s.watermarkJSON(wm))
		r.Watermark = replay.WatermarkMap(wm)
		want, err := json.Marshal(&r)
		if err != nil {
			if ok {
				t.Fatalf("case %d: fast path wrote %s; encoding/json fails: %v", i, got, err)
			}
			continue
		}
		if !ok {
			t.Fatalf("case %d: fast path declined a response encoding/json writes: %s", i, want)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// TestRouteJSONDeclinesWhatItCannotWrite: the explain table and non-finite
// floats go to encoding/json.
func TestRouteJSONDeclinesWhatItCannotWrite(t *testing.T) {
	for name, r := range map[string]routeResponse{
		"explain": {Candidates: []candidateJSON{{Worker: "d"}}},
		"nan":     {Distance: math.NaN()},
		"inf":     {EffectiveISLRatio: math.Inf(-1)},
	} {
		if _, ok := appendRouteJSON(nil, &r, []byte("{}")); ok {
			t.Errorf("%s: fast path took it", name)
		}
	}
}

func BenchmarkRouteJSON(b *testing.B) {
	wm := &pb.Watermark{Topics: []*pb.TopicOffsets{{Topic: "kv-events", Partitions: []*pb.PartitionOffset{{Partition: 0, Offset: 1234}, {Partition: 1, Offset: 99}}},
		{Topic: "decisions", Partitions: []*pb.PartitionOffset{{Partition: 0, Offset: 77777}}}}}
	p := "bench-prefill-007"
	r := routeResponse{RequestID: "bench-123456", DecisionID: "01JD3XK5V7Q8Z9ABCDEFGHJKMN", Mode: "remote", DecodeWorker: "bench-decode-042",
		PrefillWorker: &p, Reason: "prefill_remote_eff_isl_above_threshold", Policy: "isl_bounding", PromptTokens: 16000, CachedTokens: 8192,
		EffectiveISL: 7808, EffectiveISLRatio: 0.488, ConfigHash: "277faf7a90a7d0c0", DecidedBy: "cost", Distance: 12.5}
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.Watermark = replay.WatermarkMap(wm)
			_, _ = json.Marshal(&r)
		}
	})
	r.Watermark = nil
	b.Run("hand_written", func(b *testing.B) {
		b.ReportAllocs()
		var s Server
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf, _ = appendRouteJSON(buf[:0], &r, s.watermarkJSON(wm))
		}
	})
}
