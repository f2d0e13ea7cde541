package events_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

const sharesKey = "replica-2"

var sharesLogTime = time.Unix(1_700_000_000, 0)

// sharesClockSecond is validShares' clock in Unix seconds.
const sharesClockSecond = 1_699_999_999

// validShares is a snapshot of three shares: two ranks of one worker, one
// of them with recent decisions, and a prefill worker's share of zeros (the
// writer's requests there ended).
func validShares() *pb.LoadShares {
	return &pb.LoadShares{
		WriterId: sharesKey, Seq: 42, ClockUnixNano: sharesClockSecond*int64(time.Second) + 250_000_000,
		Shares: []*pb.WorkerShare{
			{Worker: &pb.WorkerRef{WorkerId: "decode-1"}, DecodeBlocks: 812, Requests: 9, PrefillTokens: 3_000,
				RecentDecisions: 2, RecentLocalTokens: 1_500},
			{Worker: &pb.WorkerRef{WorkerId: "decode-1", DpRank: 1}, DecodeBlocks: 40, Requests: 1},
			{Worker: &pb.WorkerRef{WorkerId: "prefill-0"}},
		},
	}
}

// validSample is a latency sample of a remote prefill that completed,
// stamped in the record's second.
func validSample(id string) *pb.LatencySample {
	at := sharesClockSecond * int64(time.Second)
	ttft, itl := uint32(1_825), uint32(231)
	return &pb.LatencySample{DecisionId: id, DecidedAtUnixNano: at, LatencyPath: 1,
		LatencyInputs: []uint32{4_000, 0, 512, 3, 900, 0, 4_000, 1 << 20, 0},
		TtftUnits:     &ttft, TtftAtUnixNano: at + 180_000_000, ItlUnits: &itl, ItlAtUnixNano: at + 200_000_000}
}

// withSamples is validShares with two latency samples, one without its
// ITL.
func withSamples() *pb.LoadShares {
	s := validShares()
	s.Samples = []*pb.LatencySample{validSample("01JD0000000000000000000001"), validSample("01JD0000000000000000000002")}
	s.Samples[1].ItlUnits, s.Samples[1].ItlAtUnixNano = nil, 0
	return s
}

// TestLoadSharesRoundTrip: a valid record encodes, decodes to the same
// message, and re-encodes to the same bytes; with samples too, and with
// samples alone.
func TestLoadSharesRoundTrip(t *testing.T) {
	checkRoundTrip(t, validShares(), sharesKey, sharesLogTime, events.MarshalLoadShares, events.DecodeLoadShares)
	checkRoundTrip(t, withSamples(), sharesKey, sharesLogTime, events.MarshalLoadShares, events.DecodeLoadShares)
	only := withSamples()
	only.Shares = nil
	checkRoundTrip(t, only, sharesKey, sharesLogTime, events.MarshalLoadShares, events.DecodeLoadShares)
}

// TestLoadSharesBounds: a record at every bound is written and read; the
// refusals one past them are TestLoadSharesRefused's.
func TestLoadSharesBounds(t *testing.T) {
	s := validShares()
	s.Shares[0].DecodeBlocks, s.Shares[0].PrefillTokens, s.Shares[0].RecentLocalTokens = events.MaxShareCount, events.MaxShareCount, events.MaxShareCount
	s.Shares[1].RecentDecisions = math.MaxUint32
	s.Shares[2].RecentDecisions = 1
	s.WriterId = strings.Repeat("w", events.MaxNameLen)
	for len(s.Shares) < events.MaxShareWorkers {
		s.Shares = append(s.Shares, &pb.WorkerShare{Worker: &pb.WorkerRef{WorkerId: fmt.Sprintf("w-%05d", len(s.Shares))}})
	}
	checkRoundTrip(t, s, s.WriterId, sharesLogTime, events.MarshalLoadShares, events.DecodeLoadShares)
}

// TestLoadSharesAnyOrder: a writer sends its shares in worker order, but a
// record of distinct workers in another order is as valid.
func TestLoadSharesAnyOrder(t *testing.T) {
	s := validShares()
	slices.Reverse(s.Shares)
	checkRoundTrip(t, s, sharesKey, sharesLogTime, events.MarshalLoadShares, events.DecodeLoadShares)
}

// TestLoadSharesRefused: each rule refuses the whole record with its own
// reason, and every reason of LoadSharesReasons has a case.
func TestLoadSharesRefused(t *testing.T) {
	over := uint64(events.MaxShareCount + 1)
	cases := []refusal[*pb.LoadShares]{
		{name: "too large", value: make([]byte, events.MaxSharesBytes+1), reason: events.ReasonSharesTooLarge},
		{name: "malformed", value: []byte{4<<3 | 2, 0xff}, reason: events.ReasonSharesMalformed},
		{name: "malformed share", value: []byte{4<<3 | 2, 2, 1<<3 | 2, 5}, reason: events.ReasonSharesMalformed},
		{name: "invalid UTF-8 in a worker id", value: []byte{4<<3 | 2, 5, 1<<3 | 2, 3, 1<<3 | 2, 1, 0xff}, reason: events.ReasonSharesMalformed},
		{name: "no shares", edit: func(s *pb.LoadShares) { s.Shares = nil }, reason: events.ReasonSharesEmpty},
		{name: "too many shares", value: slices.Repeat([]byte{4<<3 | 2, 0}, events.MaxShareWorkers+1), reason: events.ReasonSharesTooManyWorkers},
		{name: "no writer", edit: func(s *pb.LoadShares) { s.WriterId = "" }, key: "-", reason: events.ReasonSharesBadWriter},
		{name: "long writer", edit: func(s *pb.LoadShares) { s.WriterId = strings.Repeat("w", events.MaxNameLen+1) }, reason: events.ReasonSharesBadWriter},
		{name: "another writer's key", key: "replica-3", reason: events.ReasonSharesKeyMismatch},
		{name: "seq 0", edit: func(s *pb.LoadShares) { s.Seq = 0 }, reason: events.ReasonSharesBadSeq},
		{name: "negative clock", edit: func(s *pb.LoadShares) { s.ClockUnixNano = -1 }, reason: events.ReasonSharesClock},
		{name: "clock past the log time", edit: func(s *pb.LoadShares) {
			s.ClockUnixNano = sharesLogTime.Add(events.MaxEventSkew + time.Nanosecond).UnixNano()
		}, reason: events.ReasonSharesClock},
		{name: "no worker", edit: func(s *pb.LoadShares) { s.Shares[2].Worker = nil }, reason: events.ReasonSharesBadWorker},
		{name: "bad worker id", edit: func(s *pb.LoadShares) { s.Shares[2].Worker.WorkerId = "a b" }, reason: events.ReasonSharesBadWorker},
		{name: "bad dp rank", edit: func(s *pb.LoadShares) { s.Shares[1].Worker.DpRank = events.MaxDPSize }, reason: events.ReasonSharesBadWorker},
		{name: "a worker twice", edit: func(s *pb.LoadShares) { s.Shares[2].Worker = &pb.WorkerRef{WorkerId: "decode-1", DpRank: 1} }, reason: events.ReasonSharesDuplicateWorker},
		{name: "a worker twice, apart", edit: func(s *pb.LoadShares) { s.Shares[2].Worker = &pb.WorkerRef{WorkerId: "decode-1"} }, reason: events.ReasonSharesDuplicateWorker},
		{name: "decode blocks past the bound", edit: func(s *pb.LoadShares) { s.Shares[0].DecodeBlocks = over }, reason: events.ReasonSharesBadCount},
		{name: "prefill tokens past the bound", edit: func(s *pb.LoadShares) { s.Shares[2].PrefillTokens = over }, reason: events.ReasonSharesBadCount},
		{name: "recent tokens past the bound", edit: func(s *pb.LoadShares) { s.Shares[0].RecentLocalTokens = over }, reason: events.ReasonSharesBadCount},
		{name: "blocks without requests", edit: func(s *pb.LoadShares) { s.Shares[1].Requests = 0 }, reason: events.ReasonSharesBadCount},
		{name: "local tokens without decisions", edit: func(s *pb.LoadShares) { s.Shares[0].RecentDecisions = 0 }, reason: events.ReasonSharesBadCount},
		{name: "too many samples", value: slices.Repeat([]byte{5<<3 | 2, 0}, events.MaxShareSamples+1), reason: events.ReasonSharesTooManySamples},
		{name: "malformed sample", value: []byte{5<<3 | 2, 2, 4<<3 | 2, 5}, reason: events.ReasonSharesMalformed},
	}
	badSample := func(name string, edit func(*pb.LatencySample)) refusal[*pb.LoadShares] {
		return refusal[*pb.LoadShares]{name: name, reason: events.ReasonSharesBadSample, edit: func(s *pb.LoadShares) {
			s.Samples = withSamples().Samples
			edit(s.Samples[1])
		}}
	}
	big := uint32(1<<20 + 1)
	cases = append(cases,
		badSample("a sample without a decision id", func(e *pb.LatencySample) { e.DecisionId = "" }),
		badSample("a sample's decision id too long", func(e *pb.LatencySample) { e.DecisionId = strings.Repeat("d", events.MaxIDLen+1) }),
		badSample("a decision sampled twice", func(e *pb.LatencySample) { e.DecisionId = "01JD0000000000000000000001" }),
		badSample("an unknown path", func(e *pb.LatencySample) { e.LatencyPath = 2 }),
		badSample("eight features", func(e *pb.LatencySample) { e.LatencyInputs = e.LatencyInputs[:8] }),
		badSample("a feature past 2^20", func(e *pb.LatencySample) { e.LatencyInputs[3] = big }),
		badSample("no target", func(e *pb.LatencySample) { e.TtftUnits = nil }),
		badSample("a TTFT past 2^20", func(e *pb.LatencySample) { e.TtftUnits = &big }),
		badSample("a negative decision time", func(e *pb.LatencySample) { e.DecidedAtUnixNano = -1 }),
		badSample("a TTFT past the log time", func(e *pb.LatencySample) {
			e.TtftAtUnixNano = sharesLogTime.Add(events.MaxEventSkew + time.Nanosecond).UnixNano()
		}),
	)
	checkRefusals(t, cases, validShares, sharesKey, func(key, v []byte) error {
		_, err := events.DecodeLoadShares(key, v, sharesLogTime)
		return err
	}, events.LoadSharesReasons)
}

// TestMarshalLoadSharesRefusesWhatReadersRefuse: a writer never produces
// a record that a reader would refuse, nor one past the byte bound.
func TestMarshalLoadSharesRefusesWhatReadersRefuse(t *testing.T) {
	s := validShares()
	s.Shares[0].Worker.DpRank = events.MaxDPSize
	if _, err := events.MarshalLoadShares(s, sharesKey); events.ValidationReason(err) != events.ReasonSharesBadWorker {
		t.Fatalf("bad worker: got %v", err)
	}
	if _, err := events.MarshalLoadShares(validShares(), "replica-3"); events.ValidationReason(err) != events.ReasonSharesKeyMismatch {
		t.Fatalf("another key: got %v", err)
	}
	many := validShares()
	for len(many.Shares) <= events.MaxShareWorkers {
		many.Shares = append(many.Shares, &pb.WorkerShare{Worker: &pb.WorkerRef{WorkerId: fmt.Sprintf("w-%05d", len(many.Shares))}})
	}
	if _, err := events.MarshalLoadShares(many, sharesKey); events.ValidationReason(err) != events.ReasonSharesTooManyWorkers {
		t.Fatalf("%d shares: got %v", len(many.Shares), err)
	}
	// Valid shares whose worker ids are long: fewer than MaxShareWorkers
	// of them pass the byte bound, and the writer must split them.
	long := validShares()
	for len(long.Shares) < events.MaxSharesBytes/events.MaxWorkerIDLen+1 {
		id := fmt.Sprintf("%05d-%s", len(long.Shares), strings.Repeat("w", events.MaxWorkerIDLen-6))
		long.Shares = append(long.Shares, &pb.WorkerShare{Worker: &pb.WorkerRef{WorkerId: id}})
	}
	if _, err := events.MarshalLoadShares(long, sharesKey); events.ValidationReason(err) != events.ReasonSharesTooLarge {
		t.Fatalf("%d shares of long worker ids: got %v", len(long.Shares), err)
	}
}

// FuzzDecodeLoadShares: any bytes either decode to a record that passes
// the rules and re-encodes to one that decodes to an equal message, or are
// refused with one of the fixed reasons. Never a panic.
func FuzzDecodeLoadShares(f *testing.F) {
	v, err := events.MarshalLoadShares(validShares(), sharesKey)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v)
	f.Add(v[:len(v)/2])
	f.Add(protowire.AppendTag(slices.Clone(v), 4, protowire.BytesType))
	f.Add(append(slices.Clone(v), v[len(v)-12:]...)) // the last share twice, as bytes
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		checkDecoded(t, v, sharesKey, sharesLogTime, events.MarshalLoadShares, events.DecodeLoadShares, events.LoadSharesReasons)
	})
}
