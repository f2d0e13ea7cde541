package statestore

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// BenchmarkApplyLoadShares: what a peer of --load-deltas snapshots spends
// on a writer's snapshot, decoding, validation and the rows together: 7
// writers, 1 ms of clock apart, each record of `shares` decode workers of
// the 128 registered (a group commit's snapshot holds about 10 in bench
// scale), applied `poll` records a call: a peer's fetches bring one or two
// snapshots each at a writer's pace, so what a call costs apart from its
// records counts. cpu-ns/op is per record; ns/share divides it by its
// shares.
//
//	go test ./statestore -run '^$' -bench ApplyLoadShares -benchtime 20000x -count 6
func BenchmarkApplyLoadShares(b *testing.B) {
	for _, poll := range []int{1, 64} {
		for _, shares := range []int{3, 10, 40} {
			b.Run(fmt.Sprintf("poll=%d/shares=%d", poll, shares), func(b *testing.B) {
				h := perfHarnessWith(b, Options{Source: SourceLoadShares, ReplicaID: shareReplica})
				benchApplyBy(b, h, shareRecords(h, b.N, shares, 0), poll)
				b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N*shares), "ns/share")
			})
		}
	}
}

// BenchmarkApplyLoadSharesSamples: BenchmarkApplyLoadShares' snapshots of
// 10 shares with `samples` latency samples each (the requests of the
// writer that ended since its last snapshot), applied one a call: what a
// peer's latency model learning from its peers costs it, per record.
//
//	go test ./statestore -run '^$' -bench ApplyLoadSharesSamples -benchtime 20000x -count 6
func BenchmarkApplyLoadSharesSamples(b *testing.B) {
	for _, samples := range []int{0, 1, 4} {
		b.Run(fmt.Sprintf("samples=%d", samples), func(b *testing.B) {
			// As serve's default (--peer-requests memory): the model in
			// memory, checkpointed with the open requests.
			h := perfHarnessWith(b, Options{Source: SourceLoadShares, ReplicaID: shareReplica, PeerSums: true})
			benchApplyBy(b, h, shareRecords(h, b.N, 10, samples), 1)
		})
	}
}

// shareRecords builds n snapshots of shares distinct decode workers each,
// from 7 writers in turn, in worker order as a writer sends them, and
// samples latency samples of requests decided 2 s before the record's
// clock.
func shareRecords(h *harness, n, shares, samples int) []*kgo.Record {
	rng := rand.New(rand.NewPCG(uint64(shares), 5))
	const writers = 7
	recs := make([]*kgo.Record, 0, n)
	for i := range n {
		w := fmt.Sprintf("replica-%d", i%writers)
		ss := make([]*pb.WorkerShare, 0, shares)
		for _, k := range rng.Perm(perfDecode)[:shares] {
			reqs := uint32(rng.IntN(4))
			ss = append(ss, shr(fmt.Sprintf("decode-%03d", k), uint64(reqs)*uint64(rng.IntN(400)), reqs,
				uint64(rng.IntN(2))*4096, 1+uint32(rng.IntN(8)), uint64(rng.IntN(2048))))
		}
		slices.SortFunc(ss, func(a, b *pb.WorkerShare) int { return cmp.Compare(a.Worker.WorkerId, b.Worker.WorkerId) })
		clock := shareT0 + int64(i)*1e6
		rec := sharesOf(w, uint64(1+i/writers), clock, ss...)
		for j := range samples {
			ttft, itl := uint32(1000+rng.IntN(2000)), uint32(100+rng.IntN(200))
			in := make([]uint32, 9)
			for k := range in {
				in[k] = uint32(rng.IntN(5000))
			}
			rec.Samples = append(rec.Samples, &pb.LatencySample{DecisionId: fmt.Sprintf("d%07d-%d", i, j), DecidedAtUnixNano: clock - 2*sec,
				LatencyPath: uint32(rng.IntN(2)), LatencyInputs: in, TtftUnits: &ttft, TtftAtUnixNano: clock - sec, ItlUnits: &itl, ItlAtUnixNano: clock})
		}
		recs = append(recs, h.record(w, rec))
	}
	return recs
}
