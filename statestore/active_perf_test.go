package statestore

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Benchmarks of the decision hot path as `pdrouter bench api` drives it:
// 128 decode and 32 prefill workers of block size 16, decisions with a
// candidate row per worker and chains of 64 to 2,048 hashes (prompts of 1k
// to 32k tokens) sharing one of 16 prefixes of 32 blocks.
//
//	go test ./statestore -run '^$' -bench 'Decision' -benchmem

const perfDecode, perfPrefill = 128, 32

func perfHarness(b testing.TB) *harness { return perfHarnessWith(b, Options{}) }

// perfHarnessWith is perfHarness on a store opened with o.
func perfHarnessWith(b testing.TB, o Options) *harness {
	b.Helper()
	h := newHarnessWith(b, 16, o)
	var recs []*kgo.Record
	for i := 0; i < perfDecode; i++ {
		id := fmt.Sprintf("decode-%03d", i)
		recs = append(recs, h.record(id, registration(id, pb.Pool_POOL_DECODE, 16, 0)))
	}
	for i := 0; i < perfPrefill; i++ {
		id := fmt.Sprintf("prefill-%03d", i)
		recs = append(recs, h.record(id, registration(id, pb.Pool_POOL_PREFILL, 16, 0)))
	}
	h.apply(recs...)
	return h
}

// perfBodies is how many distinct prompts the decisions draw from, like
// the 512 pre-built bodies of the load generator.
const perfBodies = 512

// perfDecisions builds n decision records decided from t0 on, 1 µs apart,
// whose prompts are drawn from perfBodies prompts.
func perfDecisions(n int, seed uint64, t0 int64) []*pb.DecisionRecord {
	rng := rand.New(rand.NewPCG(seed, 3))
	bodies := make([][]uint64, perfBodies)
	for i := range bodies {
		tokens := 1024 + rng.IntN(32768-1024+1)
		prefix := uint64(rng.IntN(16))
		hs := make([]uint64, tokens/16)
		for j := range hs {
			if j < 32 {
				hs[j] = prefix<<40 | uint64(j+1)
			} else {
				hs[j] = rng.Uint64()
			}
		}
		bodies[i] = hs
	}
	out := make([]*pb.DecisionRecord, n)
	for i := range out {
		dw := rng.IntN(perfDecode)
		d := &pb.DecisionRecord{
			DecisionId: fmt.Sprintf("%d-%08d", seed, i), RequestId: fmt.Sprintf("req-%d-%08d", seed, i),
			Model: "bench", Mode: "local", DecodeWorker: &pb.WorkerRef{WorkerId: fmt.Sprintf("decode-%03d", dw)},
			DecidedAtUnixNano: t0 + int64(i)*1000, BlockSize: 16, Reason: "bypass", Policy: "isl_bounding",
		}
		d.Watermark, d.ConfigJson = perfWatermark(rng), `{"policy":"isl_bounding","eff_isl_threshold":2048,"eff_isl_ratio_threshold":0.7}`
		d.EffIslCheck = &pb.Check{Name: "eff_isl_threshold", Evaluated: true, Known: true, Value: 904, Limit: 2048, Hit: true}
		d.RatioCheck = &pb.Check{Name: "eff_isl_ratio_threshold", Evaluated: true, Known: true, Value: 0.18, Limit: 0.7, Hit: true}
		hs := bodies[rng.IntN(len(bodies))]
		tokens := len(hs)*16 + rng.IntN(16)
		d.PromptTokens = uint32(tokens)
		d.EffectiveIsl = uint32(tokens / 2)
		if rng.IntN(2) == 0 {
			d.Mode = "remote"
			d.PrefillWorker = &pb.WorkerRef{WorkerId: fmt.Sprintf("prefill-%03d", rng.IntN(perfPrefill))}
		}
		for w := 0; w < perfDecode+perfPrefill; w++ {
			c := &pb.Candidate{Pool: pb.Pool_POOL_DECODE, BlockSize: 16, Eligible: true, OverlapBlocks: uint32(rng.IntN(32)),
				ActiveDecodeBlocks: rng.Int64N(1 << 20), Cost: rng.Float64() * 1e4, TieHash: rng.Uint64(), TotalKvBlocks: 1 << 20}
			if w < perfDecode {
				c.Worker = &pb.WorkerRef{WorkerId: fmt.Sprintf("decode-%03d", w)}
			} else {
				c.Pool = pb.Pool_POOL_PREFILL
				c.Worker = &pb.WorkerRef{WorkerId: fmt.Sprintf("prefill-%03d", w-perfDecode)}
			}
			d.Candidates = append(d.Candidates, c)
		}
		d.Chains = []*pb.HashChain{{BlockSize: 16, BlockHashes: hs}}
		out[i] = d
	}
	return out
}

// perfWatermark is a decision's watermark in a log of the default
// partition counts (migrations/topics.go): every partition of every topic.
func perfWatermark(rng *rand.Rand) *pb.Watermark {
	w := &pb.Watermark{}
	for _, t := range []struct {
		name  string
		parts int
	}{{"kv-events", 16}, {"load", 8}, {"workers", 4}, {"decisions", 16}, {"outcomes", 16}} {
		to := &pb.TopicOffsets{Topic: t.name}
		for p := range t.parts {
			to.Partitions = append(to.Partitions, &pb.PartitionOffset{Partition: int32(p), Offset: rng.Int64N(1 << 30)})
		}
		w.Topics = append(w.Topics, to)
	}
	return w
}

// BenchmarkLocalDecisionRoundTrip: this replica's decision counted at once
// (RecordLocalDecision), then its log copy applied (in batches of 64).
// cpu-ns/op is the process's CPU time (Pebble's flushes and compactions
// included).
func BenchmarkLocalDecisionRoundTrip(b *testing.B) {
	h := perfHarness(b)
	ds := perfDecisions(b.N, 1, 1e18)
	recs := make([]*kgo.Record, len(ds))
	for i, d := range ds {
		recs[i] = h.record(d.GetDecodeWorker().GetWorkerId(), d)
	}
	cpu0 := processCPU()
	b.ResetTimer()
	for lo := 0; lo < len(ds); lo += 64 {
		hi := min(lo+64, len(ds))
		for i, d := range ds[lo:hi] {
			if err := recordLocal(h.s, d, recs[lo+i]); err != nil {
				b.Fatal(err)
			}
		}
		if err := h.s.Apply(recs[lo:hi]); err != nil {
			b.Fatal(err)
		}
	}
	if err := h.s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

func processCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkRecordLocalDecision: the API's part only.
func BenchmarkRecordLocalDecision(b *testing.B) {
	h := perfHarness(b)
	ds := perfDecisions(b.N, 2, 1e18)
	b.ResetTimer()
	for _, d := range ds {
		if err := h.s.RecordLocalDecision(d); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyForeignDecisions: decisions of another replica, from the
// log (the whole accounting on apply). cpu-ns/op is the process's CPU time,
// Pebble's flushes included: the p of a replica group's capacity model
// (docs/scaling.md), less the fetch.
func BenchmarkApplyForeignDecisions(b *testing.B) {
	h := perfHarness(b)
	ds := perfDecisions(b.N, 3, 1e18)
	recs := make([]*kgo.Record, len(ds))
	for i, d := range ds {
		recs[i] = h.record(d.GetDecodeWorker().GetWorkerId(), d)
	}
	benchApply(b, h, recs)
}

// benchApply applies recs in batches of 64 and flushes, reporting the
// process's CPU time per record (cpu-ns/op; b.N must be len(recs)) and
// the mean value size (B/record).
func benchApply(b *testing.B, h *harness, recs []*kgo.Record) { benchApplyBy(b, h, recs, 64) }

// benchApplyBy is benchApply applying poll records a call.
func benchApplyBy(b *testing.B, h *harness, recs []*kgo.Record, poll int) {
	bytes := 0
	for _, r := range recs {
		bytes += len(r.Value)
	}
	// The setup's garbage (decision records with whole tables) is
	// collected before the measured part, not charged to it.
	runtime.GC()
	cpu0 := processCPU()
	b.ResetTimer()
	for lo := 0; lo < len(recs); lo += poll {
		if err := h.s.Apply(recs[lo:min(lo+poll, len(recs))]); err != nil {
			b.Fatal(err)
		}
	}
	if err := h.s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(len(recs)), "cpu-ns/op")
	b.ReportMetric(float64(bytes)/float64(len(recs)), "B/record")
}

// BenchmarkMatchActive: the active run of a prompt on every decode worker,
// with 20,000 decisions of the same 512 prompts active.
func BenchmarkMatchActive(b *testing.B) {
	h := perfHarness(b)
	ds := perfDecisions(20000, 4, 1e18)
	for _, d := range ds {
		if err := h.s.RecordLocalDecision(d); err != nil {
			b.Fatal(err)
		}
	}
	dst := make([]int, perfDecode+perfPrefill)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		chain := ds[i%len(ds)].GetChains()[0].GetBlockHashes()
		h.s.Read(func(v View) { v.MatchActive(16, chain, dst) })
	}
}

// recordLocal is the API's call: RecordLocalDecisionAt where the store has
// it (this build), else RecordLocalDecision.
func recordLocal(s *Store, d *pb.DecisionRecord, r *kgo.Record) error {
	if at, ok := any(s).(interface {
		RecordLocalDecisionAt(*pb.DecisionRecord, []byte, int32, int64) error
	}); ok {
		return at.RecordLocalDecisionAt(d, r.Value, r.Partition, r.Offset)
	}
	return s.RecordLocalDecision(d)
}
