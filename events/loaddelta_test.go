package events_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

const deltaKey = "decode-7"

var deltaLogTime = time.Unix(1_700_000_000, 0)

// validDelta is a record of two decisions, the second sharing the first's
// leading hashes, and two lifecycle events.
func validDelta() *pb.LoadDelta {
	ttft, itl, out := 120.5, 11.25, uint64(64)
	w := &pb.WorkerRef{WorkerId: deltaKey}
	t0 := deltaLogTime.UnixNano() - int64(time.Second)
	return &pb.LoadDelta{
		WriterId: "replica-0",
		Decisions: []*pb.DecisionDelta{
			{DecisionId: "d-1", RequestId: "r-1", DecidedAtUnixNano: t0, DecodeWorker: w,
				PrefillWorker: &pb.WorkerRef{WorkerId: "prefill-2", DpRank: 1}, BlockSize: 16, PromptTokens: 100,
				EffectiveIsl: 60, PrefillCachedTokens: 32, ActiveHashes: []uint64{11, 12, 13, 14},
				LatencyPath: 1, LatencyInputs: []uint32{68, 0, 0, 3, 120, 0, 68, 500, 0}},
			{DecisionId: "d-2", RequestId: "r-2", DecidedAtUnixNano: t0 + 1, DecodeWorker: w, Local: true,
				BlockSize: 16, PromptTokens: 90, EffectiveIsl: 40, SharesHashesWith: 1, SharedHashes: 3,
				ActiveHashes: []uint64{21, 22}},
		},
		Lifecycle: []*pb.LifecycleDelta{
			{DecisionId: "d-0", RequestId: "r-0", Kind: pb.OutcomeEvent_KIND_COMPLETED, EventTimeUnixNano: t0 + 2,
				DecodeWorker: w, TtftMs: &ttft, ItlMsMean: &itl, OutputTokens: &out},
			{RequestId: "r-9", Kind: pb.OutcomeEvent_KIND_PREFILL_DONE, EventTimeUnixNano: t0 + 3, DecodeWorker: w},
		},
	}
}

// TestLoadDeltaRoundTrip: a valid record encodes, decodes to the same
// message, and its chains resolve the shared prefix.
func TestLoadDeltaRoundTrip(t *testing.T) {
	got := checkRoundTrip(t, validDelta(), deltaKey, deltaLogTime, events.MarshalLoadDelta, events.DecodeLoadDelta)
	chains := events.LoadDeltaChains(got)
	if want := [][]uint64{{11, 12, 13, 14}, {11, 12, 13, 21, 22}}; !slices.EqualFunc(chains, want, slices.Equal) {
		t.Fatalf("chains %v, want %v", chains, want)
	}
}

// checkRoundTrip: m encodes with key, decodes at logTime to an equal
// message, which re-encodes to the same bytes; it returns the decoded one.
func checkRoundTrip[M proto.Message](t *testing.T, m M, key string, logTime time.Time,
	marshal func(M, string) ([]byte, error), decode func(key, value []byte, logTime time.Time) (M, error)) M {
	t.Helper()
	v, err := marshal(m, key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode([]byte(key), v, logTime)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, m) {
		t.Fatalf("decoded %v, want %v", got, m)
	}
	again, err := marshal(got, key)
	if err != nil || string(again) != string(v) {
		t.Fatalf("re-encoded differently (%v)", err)
	}
	return got
}

// TestLoadDeltaRefused: each rule refuses the whole record with its own
// reason, and every reason of LoadDeltaReasons has a case.
func TestLoadDeltaRefused(t *testing.T) {
	longID := strings.Repeat("x", events.MaxIDLen+1)
	many := make([]uint64, events.MaxDeltaHashes+1)
	cases := []refusal[*pb.LoadDelta]{
		{name: "too large", value: make([]byte, events.MaxDeltaBytes+1), reason: events.ReasonDeltaTooLarge},
		{name: "malformed", value: []byte{0x12, 0xff}, reason: events.ReasonDeltaMalformed},
		{name: "empty", edit: func(d *pb.LoadDelta) { d.Decisions, d.Lifecycle = nil, nil }, reason: events.ReasonDeltaEmpty},
		{name: "too many entries", edit: func(d *pb.LoadDelta) {
			for len(d.Lifecycle) <= events.MaxDeltaEntries {
				d.Lifecycle = append(d.Lifecycle, d.Lifecycle[1])
			}
		}, reason: events.ReasonDeltaTooManyEntries},
		{name: "chain past the bound", edit: func(d *pb.LoadDelta) {
			d.Decisions[0].ActiveHashes, d.Decisions[0].PromptTokens, d.Decisions[0].EffectiveIsl = many, 1<<20, 0
		}, reason: events.ReasonDeltaTooManyHashes},
		{name: "more hashes than complete blocks", edit: func(d *pb.LoadDelta) { d.Decisions[0].PromptTokens = 63 }, reason: events.ReasonDeltaTooManyHashes},
		{name: "shared chain past the bound", edit: func(d *pb.LoadDelta) {
			d.Decisions[0].ActiveHashes, d.Decisions[0].PromptTokens = many[:events.MaxDeltaHashes], 1<<20
			d.Decisions[1].SharedHashes, d.Decisions[1].PromptTokens = events.MaxDeltaHashes, 1<<20
		}, reason: events.ReasonDeltaTooManyHashes},
		{name: "shares a later entry", edit: func(d *pb.LoadDelta) { d.Decisions[1].SharesHashesWith = 2 }, reason: events.ReasonDeltaBadShare},
		{name: "shares more than there is", edit: func(d *pb.LoadDelta) { d.Decisions[1].SharedHashes = 5 }, reason: events.ReasonDeltaBadShare},
		{name: "shared without a source", edit: func(d *pb.LoadDelta) { d.Decisions[1].SharesHashesWith = 0 }, reason: events.ReasonDeltaBadShare},
		{name: "shares another block size", edit: func(d *pb.LoadDelta) { d.Decisions[1].BlockSize, d.Decisions[1].PromptTokens = 8, 90 }, reason: events.ReasonDeltaBadShare},
		{name: "entry of another worker", edit: func(d *pb.LoadDelta) { d.Decisions[1].DecodeWorker = &pb.WorkerRef{WorkerId: "decode-8"} }, reason: events.ReasonDeltaKeyMismatch},
		{name: "lifecycle of another worker", edit: func(d *pb.LoadDelta) { d.Lifecycle[0].DecodeWorker = &pb.WorkerRef{WorkerId: "decode-8"} }, reason: events.ReasonDeltaKeyMismatch},
		{name: "bad key", key: "a/b", reason: events.ReasonDeltaKeyMismatch},
		{name: "bad prefill worker", edit: func(d *pb.LoadDelta) { d.Decisions[0].PrefillWorker.WorkerId = "" }, reason: events.ReasonDeltaBadWorker},
		{name: "local with a prefill worker", edit: func(d *pb.LoadDelta) { d.Decisions[0].Local = true }, reason: events.ReasonDeltaBadWorker},
		{name: "no decode worker", edit: func(d *pb.LoadDelta) { d.Lifecycle[1].DecodeWorker = nil }, reason: events.ReasonDeltaBadWorker},
		{name: "no decision id", edit: func(d *pb.LoadDelta) { d.Decisions[0].DecisionId = "" }, reason: events.ReasonDeltaBadID},
		{name: "long request id", edit: func(d *pb.LoadDelta) { d.Lifecycle[0].RequestId = longID }, reason: events.ReasonDeltaBadID},
		{name: "long writer id", edit: func(d *pb.LoadDelta) { d.WriterId = strings.Repeat("w", events.MaxNameLen+1) }, reason: events.ReasonDeltaBadID},
		{name: "no block size", edit: func(d *pb.LoadDelta) { d.Decisions[0].BlockSize = 0 }, reason: events.ReasonDeltaBadTokens},
		{name: "effective ISL past the prompt", edit: func(d *pb.LoadDelta) { d.Decisions[1].EffectiveIsl = 91 }, reason: events.ReasonDeltaBadTokens},
		{name: "cached past the prompt", edit: func(d *pb.LoadDelta) { d.Decisions[0].PrefillCachedTokens = 101 }, reason: events.ReasonDeltaBadTokens},
		{name: "cached without a prefill worker", edit: func(d *pb.LoadDelta) { d.Decisions[1].PrefillCachedTokens = 1 }, reason: events.ReasonDeltaBadTokens},
		{name: "latency inputs short", edit: func(d *pb.LoadDelta) { d.Decisions[0].LatencyInputs = d.Decisions[0].LatencyInputs[:8] }, reason: events.ReasonDeltaBadLatency},
		{name: "latency input too large", edit: func(d *pb.LoadDelta) { d.Decisions[0].LatencyInputs[4] = 1<<20 + 1 }, reason: events.ReasonDeltaBadLatency},
		{name: "unknown latency path", edit: func(d *pb.LoadDelta) { d.Decisions[0].LatencyPath = 2 }, reason: events.ReasonDeltaBadLatency},
		{name: "path without inputs", edit: func(d *pb.LoadDelta) { d.Decisions[1].LatencyPath = 1 }, reason: events.ReasonDeltaBadLatency},
		{name: "NaN TTFT", edit: func(d *pb.LoadDelta) { nan := math.NaN(); d.Lifecycle[0].TtftMs = &nan }, reason: events.ReasonDeltaBadLatency},
		{name: "negative ITL", edit: func(d *pb.LoadDelta) { neg := -1.0; d.Lifecycle[0].ItlMsMean = &neg }, reason: events.ReasonDeltaBadLatency},
		{name: "unknown kind", edit: func(d *pb.LoadDelta) { d.Lifecycle[1].Kind = 9 }, reason: events.ReasonDeltaBadKind},
		{name: "future decision", edit: func(d *pb.LoadDelta) {
			d.Decisions[1].DecidedAtUnixNano = deltaLogTime.Add(events.MaxEventSkew + time.Second).UnixNano()
		}, reason: events.ReasonDeltaEventTime},
		{name: "negative lifecycle time", edit: func(d *pb.LoadDelta) { d.Lifecycle[0].EventTimeUnixNano = -1 }, reason: events.ReasonDeltaEventTime},
	}
	checkRefusals(t, cases, validDelta, deltaKey, func(key, v []byte) error {
		_, err := events.DecodeLoadDelta(key, v, deltaLogTime)
		return err
	}, events.LoadDeltaReasons)
}

// refusal is a value a decoder must refuse with reason: a valid record
// changed by edit, or value instead, read with key (empty: the valid
// record's key).
type refusal[M proto.Message] struct {
	name   string
	edit   func(M)
	key    string
	value  []byte
	reason string
}

// checkRefusals decodes each case with decode and wants a
// *ValidationError of its reason; each of reasons must have a case.
func checkRefusals[M proto.Message](t *testing.T, cases []refusal[M], valid func() M, validKey string,
	decode func(key, value []byte) error, reasons []string) {
	seen := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := c.value
			if v == nil {
				m := valid()
				if c.edit != nil {
					c.edit(m)
				}
				var err error
				if v, err = (proto.MarshalOptions{Deterministic: true}).Marshal(m); err != nil {
					t.Fatal(err)
				}
			}
			key := c.key
			if key == "" {
				key = validKey
			}
			err := decode([]byte(key), v)
			var ve *events.ValidationError
			if !errors.As(err, &ve) || ve.Reason != c.reason {
				t.Fatalf("got %v, want reason %s", err, c.reason)
			}
			seen[c.reason] = true
		})
	}
	for _, r := range reasons {
		if !seen[r] {
			t.Errorf("no case refuses a record with reason %s", r)
		}
	}
}

// TestMarshalLoadDeltaRefusesWhatReadersRefuse: a writer never produces a
// record that a reader would refuse.
func TestMarshalLoadDeltaRefusesWhatReadersRefuse(t *testing.T) {
	d := validDelta()
	d.Decisions[0].BlockSize = 0
	if _, err := events.MarshalLoadDelta(d, deltaKey); events.ValidationReason(err) != events.ReasonDeltaBadTokens {
		t.Fatalf("got %v", err)
	}
	if _, err := events.MarshalLoadDelta(validDelta(), "decode-8"); events.ValidationReason(err) != events.ReasonDeltaKeyMismatch {
		t.Fatalf("got %v", err)
	}
}

// FuzzDecodeLoadDelta: any bytes either decode to a record that passes the
// rules, re-encodes and decodes to an equal message, and whose chains stay
// within the bound; or are refused with one of the fixed reasons. Never a
// panic.
func FuzzDecodeLoadDelta(f *testing.F) {
	v, err := events.MarshalLoadDelta(validDelta(), deltaKey)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v)
	f.Add(v[:len(v)/2])
	f.Add(protowire.AppendTag(slices.Clone(v), 2, protowire.BytesType))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		d, ok := checkDecoded(t, v, deltaKey, deltaLogTime, events.MarshalLoadDelta, events.DecodeLoadDelta, events.LoadDeltaReasons)
		if !ok {
			return
		}
		for i, c := range events.LoadDeltaChains(d) {
			if len(c) > events.MaxDeltaHashes {
				t.Fatalf("decision %d resolves to %d hashes", i, len(c))
			}
		}
	})
}

// checkDecoded is the body of a decoder's fuzz target: v is either refused
// with one of reasons, or decodes to a record (returned, with true) that
// re-encodes to one that decodes to an equal message.
func checkDecoded[M proto.Message](t *testing.T, v []byte, key string, logTime time.Time,
	marshal func(M, string) ([]byte, error), decode func(key, value []byte, logTime time.Time) (M, error), reasons []string) (M, bool) {
	m, err := decode([]byte(key), v, logTime)
	if err != nil {
		if r := events.ValidationReason(err); !slices.Contains(reasons, r) {
			t.Fatalf("refused with reason %q, not one of the record's reasons: %v", r, err)
		}
		return m, false
	}
	b, err := marshal(m, key)
	if err != nil {
		t.Fatalf("an accepted record does not re-encode: %v", err)
	}
	m2, err := decode([]byte(key), b, logTime)
	if err != nil || !proto.Equal(m, m2) {
		t.Fatalf("re-encoded record decodes to %v (%v), want %v", m2, err, m)
	}
	return m, true
}

// TestDecodeLoadDeltaRecord: a load delta read from its topic decodes
// through events.Decode by its own rules, and each refusal has the kind
// errors.Is tells (malformed, too large, invalid) and its delta reason as
// the metric label.
func TestDecodeLoadDeltaRecord(t *testing.T) {
	names := events.Names{Prefix: "p."}
	schema := []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte(events.SchemaOf(events.TopicLoadDeltas))}}
	good, err := events.MarshalLoadDelta(validDelta(), deltaKey)
	if err != nil {
		t.Fatal(err)
	}
	rec := func(key string, v []byte) *kgo.Record {
		return &kgo.Record{Topic: names.Physical(events.TopicLoadDeltas), Key: []byte(key), Value: v, Headers: schema, Timestamp: deltaLogTime}
	}
	env, err := events.Decode(names, rec(deltaKey, good))
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := env.Message.(*pb.LoadDelta); !ok || !proto.Equal(d, validDelta()) || env.Topic != events.TopicLoadDeltas {
		t.Fatalf("decoded %T %v on %s", env.Message, env.Message, env.Topic)
	}
	for _, c := range []struct {
		name   string
		r      *kgo.Record
		kind   error
		reason string
	}{
		{"malformed", rec(deltaKey, []byte{0x12, 0xff, 0xff, 0xff, 0xff, 0x0f}), events.ErrMalformed, events.ReasonDeltaMalformed},
		{"too large", rec(deltaKey, make([]byte, events.MaxDeltaBytes+1)), events.ErrTooLarge, events.ReasonDeltaTooLarge},
		{"another worker's key", rec("decode-8", good), events.ErrInvalid, events.ReasonDeltaKeyMismatch},
	} {
		_, err := events.Decode(names, c.r)
		if !errors.Is(err, c.kind) || events.Reason(err) != c.reason {
			t.Errorf("%s: %v (reason %q), want kind %v and reason %s", c.name, err, events.Reason(err), c.kind, c.reason)
		}
	}
}
