package ingest

import (
	"errors"
	"testing"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

var knownReasons = map[string]bool{
	ReasonTooLarge: true, ReasonTruncated: true, ReasonBadMsgpack: true, ReasonTooDeep: true, ReasonNotArray: true,
	ReasonBatchLength: true, ReasonTimestamp: true, ReasonEvents: true, ReasonDPRank: true, ReasonTrailing: true,
	ReasonEventShape: true, ReasonTag: true, ReasonField: true,
}

// fuzzDecode checks the decoder's contract on any input: no panic; an error
// is a typed *DecodeError with a known reason and an offset inside the
// payload; a success yields events that events.Validate accepts, so nothing
// invalid can reach Kafka.
func fuzzDecode(f *testing.F, eng pb.Engine) {
	payloads, _ := loadVectors(f)
	for _, p := range payloads {
		f.Add(p)
	}
	f.Add([]byte{0x92, 0x01, 0x91, 0x92, 0xa1, 'X', 0xc0})
	// A float64 timestamp of 9.5e9 s, which used to wrap to negative
	// nanoseconds.
	f.Add([]byte{0x92, 0xcb, 0x42, 0x01, 0xb1, 0xf3, 0xf8, 0x00, 0x00, 0x00, 0x90})
	// A batch keyed by name: {"ts": 1, "events": [], "data_parallel_rank": 0}.
	f.Add([]byte{0x83, 0xa2, 't', 's', 0x01, 0xa6, 'e', 'v', 'e', 'n', 't', 's', 0x90,
		0xb2, 'd', 'a', 't', 'a', '_', 'p', 'a', 'r', 'a', 'l', 'l', 'e', 'l', '_', 'r', 'a', 'n', 'k', 0x00})
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := DecodeBatch(p, eng)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			if !knownReasons[de.Reason] || de.Offset < 0 || de.Offset > len(p) {
				t.Fatalf("bad error: %+v", de)
			}
			return
		}
		if b.TimeUnixNano < 0 {
			t.Fatalf("negative event time %d", b.TimeUnixNano)
		}
		rec := &pb.KvEventRecord{Worker: &pb.WorkerRef{WorkerId: "w"}, Events: b.Events}
		if err := events.Validate(rec); err != nil {
			t.Fatalf("decoded batch is invalid: %v", err)
		}
		if _, err := events.NewRecord(events.Names{}, []byte("w"), rec); err != nil {
			t.Fatalf("NewRecord: %v", err)
		}
	})
}

func FuzzDecodeVLLM(f *testing.F)   { fuzzDecode(f, pb.Engine_ENGINE_VLLM) }
func FuzzDecodeSGLang(f *testing.F) { fuzzDecode(f, pb.Engine_ENGINE_SGLANG) }
func FuzzDecodeTRTLLM(f *testing.F) { fuzzDecode(f, pb.Engine_ENGINE_TRTLLM) }

// FuzzParseFrames checks the live and replay frame parsers: no panic, and
// a parsed seq round-trips through SeqFrame.
func FuzzParseFrames(f *testing.F) {
	f.Add([]byte{}, SeqFrame(258), []byte{0x90}, []byte("kv@x"))
	f.Add([]byte{}, SeqFrame(EndSeq), []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, a, b, c, d []byte) {
		for _, frames := range [][][]byte{{a, b, c}, {a, b, c, d}, {a, b}, {b, c}} {
			if m, err := ParseLive(frames); err == nil && string(SeqFrame(m.Seq)) != string(frames[1]) {
				t.Fatalf("live seq %d does not round-trip %x", m.Seq, frames[1])
			}
			if m, end, err := ParseReplay(frames); err == nil && end != (m.Seq == EndSeq) {
				t.Fatalf("end=%v for seq %x", end, m.Seq)
			}
		}
	})
}
