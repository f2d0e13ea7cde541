package sim

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/ingest"
	"github.com/pdrouter/pdrouter/statestore"
)

func hostEngine(t *testing.T, gpuBlocks, hostBlocks int) (*Engine, *recorder) {
	t.Helper()
	rec := &recorder{q: &eventQueue{}, first: map[string]simTime{}, firstStep: map[string]int{}, done: map[string]simTime{}}
	e, err := newEngine(EngineConfig{ID: "e", Pool: PoolDecode, Model: "m", BlockSize: 16, NumBlocks: gpuBlocks,
		MaxBatchedTokens: 8192, MaxNumSeqs: 64, HostBlocks: hostBlocks, Seed: 7}, NewTiming(DefaultHardware()), rec.q, rec)
	if err != nil {
		t.Fatal(err)
	}
	rec.e = e
	return e, rec
}

// serve runs r alone on the engine to the end and returns its seq and TTFT.
func serve(e *Engine, rec *recorder, r *Request) (*seq, time.Duration) {
	start := rec.q.now
	s := e.submit(r, kindLocal, r.Tokens())
	e.kick()
	runQueue(rec.q)
	return s, rec.first[r.ID] - start
}

func eventsOf(evs []KVEvent, kind KVEventKind, medium string) (n int, hashes []uint64) {
	for _, ev := range evs {
		if ev.Kind == kind && ev.Medium == medium {
			n++
			hashes = append(hashes, ev.Hashes...)
		}
	}
	return n, hashes
}

// TestHostTierLRU: the tier stores what it lacks, announces it as one BlockStored of
// medium CPU per contiguous run, as vLLM's connector does (no tokens, no parent),
// evicts least recently used
// blocks (a touched prefix's head last) in one BlockRemoved of medium CPU, never
// evicts a block a load reads, and skips a store it cannot make room for.
func TestHostTierLRU(t *testing.T) {
	id := func(h uint64) uint64 { return h + 1000 }
	tier := NewHostTier(4, id)
	tier.Store([]uint64{1, 2, 3}, 2)
	evs := tier.TakeEvents()
	if len(evs) != 1 || evs[0].Kind != BlockStored || evs[0].Medium != MediumCPU || !slices.Equal(evs[0].Hashes, []uint64{1001, 1002, 1003}) ||
		evs[0].HasParent || evs[0].Tokens != nil || evs[0].BlockSize != 2 {
		t.Fatalf("first store: %+v", evs)
	}
	// 2 and 3 are held: only 4 is stored, still without a parent.
	tier.Store([]uint64{2, 3, 4}, 2)
	evs = tier.TakeEvents()
	if len(evs) != 1 || !slices.Equal(evs[0].Hashes, []uint64{1004}) || evs[0].HasParent || evs[0].Tokens != nil {
		t.Fatalf("partial store: %+v", evs)
	}
	// The tier is full (1 2 3 4, least recent first). Touching [1 2] makes 1 the most
	// recent, then 2: the order becomes 3 4 2 1.
	tier.Touch([]uint64{1, 2})
	tier.Store([]uint64{5}, 2)
	evs = tier.TakeEvents()
	if len(evs) != 2 || evs[0].Kind != BlockRemoved || evs[0].Medium != MediumCPU || !slices.Equal(evs[0].Hashes, []uint64{1003}) ||
		evs[1].Kind != BlockStored || !slices.Equal(evs[1].Hashes, []uint64{1005}) {
		t.Fatalf("evicting store: %+v", evs)
	}
	// Order now 4 2 1 5. A load protects 4 and 2: storing two blocks evicts 1 and 5.
	tier.Acquire([]uint64{4, 2})
	tier.Store([]uint64{6, 7}, 2)
	evs = tier.TakeEvents()
	if len(evs) != 2 || !slices.Equal(evs[0].Hashes, []uint64{1001, 1005}) || tier.Len() != 4 || !tier.Holds(4) || !tier.Holds(2) {
		t.Fatalf("protected blocks: %+v, len %d", evs, tier.Len())
	}
	// With 4 and 2 still protected only 6 and 7 can go: a store of three is skipped.
	tier.Store([]uint64{8, 9, 10}, 2)
	if evs = tier.TakeEvents(); len(evs) != 0 || tier.Holds(8) || tier.Len() != 4 {
		t.Fatalf("a store without room changed the tier: %+v", evs)
	}
	tier.Release([]uint64{4, 2})
	tier.Store([]uint64{8, 9, 10}, 2)
	if evs = tier.TakeEvents(); len(evs) != 2 || len(evs[0].Hashes) != 3 || tier.Len() != 4 || tier.Match([]uint64{8, 9, 10, 11}, 0, 9) != 3 {
		t.Fatalf("after release: %+v", evs)
	}
	if tier.Match([]uint64{8, 9, 10}, 1, 1) != 1 || tier.Match([]uint64{1, 9}, 0, 5) != 0 {
		t.Fatal("Match counts a leading run from `from`, at most maxBlocks")
	}
}

// TestEngineHostTierEvents: with a host tier, every block the engine caches on the
// GPU is also stored with medium CPU in the same step's batch; blocks the GPU evicts
// stay in the tier; when the tier overflows it announces removals with medium CPU.
// Without a tier no CPU event is ever published.
func TestEngineHostTierEvents(t *testing.T) {
	e, rec := hostEngine(t, 140, 200)
	a := segReq("a", 1, Segment{Seed: 1, Len: 2048}) // 128 blocks
	serve(e, rec, a)
	gpuStored, gpuHashes := eventsOf(rec.events, BlockStored, "")
	cpuStored, cpuHashes := eventsOf(rec.events, BlockStored, MediumCPU)
	if gpuStored == 0 || cpuStored == 0 || !slices.Equal(gpuHashes, cpuHashes) || len(cpuHashes) != 128 {
		t.Fatalf("a: %d GPU stores of %d blocks, %d CPU stores of %d blocks; want the same 128 blocks in both", gpuStored, len(gpuHashes), cpuStored, len(cpuHashes))
	}
	// b needs 128 fresh GPU blocks of 140: a's are evicted from the GPU (BlockRemoved,
	// GPU) and the tier, 200 blocks, has to drop 56 of a's to take b's.
	rec.events = nil
	serve(e, rec, segReq("b", 1, Segment{Seed: 2, Len: 2048}))
	_, gpuRemoved := eventsOf(rec.events, BlockRemoved, "")
	nCPURemoved, cpuRemoved := eventsOf(rec.events, BlockRemoved, MediumCPU)
	if len(gpuRemoved) == 0 || nCPURemoved != 1 || len(cpuRemoved) != 56 {
		t.Fatalf("b: GPU removed %d, CPU removed %d blocks in %d events; want GPU evictions and one CPU removal of 56", len(gpuRemoved), len(cpuRemoved), nCPURemoved)
	}
	// The tier evicts a's tail first (its head was touched last), so a's first 72
	// blocks are still in the tier.
	chain := a.Chain(16)
	if got := e.HostTier().Match(chain, 0, len(chain)); got != 72 {
		t.Fatalf("a's leading run in the tier is %d blocks, want 72", got)
	}
	for _, h := range cpuRemoved {
		if !slices.Contains(cpuHashes[72:], h) {
			t.Fatalf("the tier evicted %x, which is not of a's tail", h)
		}
	}
	e2, rec2 := hostEngine(t, 140, 0)
	serve(e2, rec2, a)
	serve(e2, rec2, segReq("b", 1, Segment{Seed: 2, Len: 2048}))
	for _, ev := range rec2.events {
		if ev.Medium != "" {
			t.Fatalf("an engine without a tier published %+v", ev)
		}
	}
}

// TestEngineHostTierTTFT: a prompt whose prefix sits only in the host tier is loaded
// at the tier's bandwidth instead of recomputed, so its TTFT lies between a GPU hit's
// and a recompute's, and equals the load plus the prefill of the rest; the loaded
// blocks enter the GPU prefix cache again.
func TestEngineHostTierTTFT(t *testing.T) {
	// 256 blocks, of which 255 can hit (the last token is always computed). The
	// evicting prompt fills all 258 blocks of the small GPU (its one output token
	// fits its last block), so the GPU keeps nothing of the first.
	const P = 4096
	prompt := Segment{Seed: 1, Len: P}
	evict := segReq("evict", 1, Segment{Seed: 2, Len: 258*16 - 1})
	ttft := func(gpuBlocks, hostBlocks int, evictFirst bool) (*seq, time.Duration, *Engine) {
		e, rec := hostEngine(t, gpuBlocks, hostBlocks)
		serve(e, rec, segReq("warm", 1, prompt))
		if evictFirst {
			serve(e, rec, evict)
		}
		s, d := serve(e, rec, segReq("again", 1, prompt))
		return s, d, e
	}
	sGPU, gpuHit, _ := ttft(1000, 0, false)
	sHost, hostHit, eHost := ttft(258, 600, true)
	sNone, recompute, _ := ttft(258, 0, true)
	if sGPU.hitTokens != 255*16 || sHost.hitTokens != 0 || sHost.hostHitTokens != 255*16 || sNone.hitTokens+sNone.hostHitTokens != 0 {
		t.Fatalf("hits: GPU case %d, host case %d+%d, recompute case %d+%d", sGPU.hitTokens, sHost.hitTokens, sHost.hostHitTokens, sNone.hitTokens, sNone.hostHitTokens)
	}
	if !(gpuHit < hostHit && hostHit < recompute) {
		t.Fatalf("TTFT GPU hit %v, host hit %v, recompute %v: want them in that order", gpuHit, hostHit, recompute)
	}
	tm := NewTiming(DefaultHardware())
	load := tm.HostLoad(255 * 16)
	if want := load + tm.Prefill(16, 255*16, 8192); hostHit != want {
		t.Fatalf("host hit TTFT %v, want the load %v plus the last block's prefill: %v", hostHit, load, want)
	}
	// 255 blocks of 2 MiB at 25 GB/s: about 21 ms, a fraction of the recompute.
	if load < 20*time.Millisecond || load > 23*time.Millisecond {
		t.Fatalf("load of 255 blocks takes %v, want ≈21.4 ms at 25 GB/s", load)
	}
	if got := eHost.Pool().Match(segReq("x", 1, prompt).Chain(16), 256); got != 256 {
		t.Fatalf("after the load the GPU holds %d blocks of the prompt, want all 256", got)
	}
}

// TestHostTierRouterView: the offline router sees blocks held only in an engine's host
// tier as host-tier overlap, and the decider credits them as documented
// (docs/conditional-disagg.md: C = round((overlap + 0.75·host) × B)).
func TestHostTierRouterView(t *testing.T) {
	fc := FleetConfig{Prefill: 0, Decode: 1, NumBlocks: 300, HostKVBytes: float64(600 * 16 * DefaultHardware().KVBytesPerToken)}
	lr, err := NewLocalRouter(decider.DefaultConfig(), false)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFleet(fc, lr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Engines()[0].HostTier().Capacity(); got != 600 {
		t.Fatalf("host tier of %d blocks, want 600", got)
	}
	prompt := Segment{Seed: 1, Len: 4096}
	w := &Workload{Name: "t", Requests: []*Request{
		segReq("warm", 1, prompt),
		segReq("evict", 1, Segment{Seed: 2, Len: 4096}),
	}}
	w.Requests[1].Arrival = 10 * time.Second
	rep, err := f.Run(context.Background(), w, "t")
	if err != nil || rep.Completed != 2 {
		t.Fatalf("%v, %d completed", err, rep.Completed)
	}
	again := segReq("again", 1, prompt, Segment{Seed: 3, Len: 8})
	d, err := lr.Route(context.Background(), again, again.Tokens())
	if err != nil {
		t.Fatal(err)
	}
	var row *decider.Candidate
	for i := range lr.dec.Candidates {
		if lr.dec.Candidates[i].Worker == d.DecodeWorker {
			row = &lr.dec.Candidates[i]
		}
	}
	// The evicting request took 256 of the GPU's 300 blocks: the prompt's tail went
	// first, so the GPU keeps its head and the tier has all of it.
	dev := f.Engines()[0].Pool().Match(again.Chain(16), 256)
	if row == nil || row.OverlapBlocks != dev || row.HostBlocks != 256-dev || dev >= 256 {
		t.Fatalf("candidate %+v; GPU holds %d of 256 blocks, want the rest as host blocks", row, dev)
	}
	if want := int64((4*dev + 3*(256-dev)) * 16 / 4); d.CachedTokens != want {
		t.Fatalf("cached tokens %d, want (overlap + 0.75·host)·16 = %d", d.CachedTokens, want)
	}
}

// TestHostTierEventsThroughIngest: the engine's CPU-tier events, encoded as vLLM
// does (map and positional), decode in pdrouter's ingest as host-tier BlockRemoved
// and offload stores: BlockStored without tokens or parent, naming the blocks by the
// engine hashes the GPU stores announced with their tokens.
func TestHostTierEventsThroughIngest(t *testing.T) {
	e, rec := hostEngine(t, 140, 200)
	a := segReq("a", 1, Segment{Seed: 1, Len: 2048})
	serve(e, rec, a)
	serve(e, rec, segReq("b", 1, Segment{Seed: 2, Len: 2048}))
	for _, f := range []WireFormat{WireMap, WirePositional} {
		b, err := ingest.DecodeBatch(EncodeBatch(offlineEpoch, rec.events, 0, f), pb.Engine_ENGINE_SIM)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Demoted) != 0 {
			t.Fatalf("%s: demoted %+v", f, b.Demoted)
		}
		var removed int
		var gpuHashes, cpuHashes []uint64
		for _, ev := range b.Events {
			switch x := ev.GetEvent().(type) {
			case *pb.KvEvent_Stored:
				if x.Stored.GetMedium() != MediumCPU {
					gpuHashes = append(gpuHashes, x.Stored.GetBlockHashes()...)
					continue
				}
				if x.Stored.GetTier() != pb.Tier_TIER_HOST || !events.IsOffloadStore(x.Stored) || x.Stored.ParentBlockHash != nil {
					t.Fatalf("%s: CPU BlockStored decoded as %v; want a host-tier offload store without parent", f, x.Stored)
				}
				cpuHashes = append(cpuHashes, x.Stored.GetBlockHashes()...)
			case *pb.KvEvent_Removed:
				if x.Removed.GetMedium() == MediumCPU {
					if x.Removed.GetTier() != pb.Tier_TIER_HOST {
						t.Fatalf("%s: CPU block removed as tier %v", f, x.Removed.GetTier())
					}
					removed += len(x.Removed.GetBlockHashes())
				}
			}
		}
		if len(cpuHashes) != 256 || removed != 56 || !slices.Equal(cpuHashes, gpuHashes) {
			t.Fatalf("%s: %d CPU blocks stored, %d removed (want 256 and 56); CPU stores name the GPU stores' hashes: %v",
				f, len(cpuHashes), removed, slices.Equal(cpuHashes, gpuHashes))
		}
	}
}

// TestHostTierRouterState: the engine's whole event stream, encoded as vLLM does and
// decoded by pdrouter's ingest, applied to a real store, gives the router state the
// same tier split as the offline view: the GPU's leading run as device overlap, the
// rest held in the CPU tier as host overlap.
func TestHostTierRouterState(t *testing.T) {
	e, rec := hostEngine(t, 140, 200)
	a := segReq("a", 1, Segment{Seed: 1, Len: 2048})
	serve(e, rec, a)
	serve(e, rec, segReq("b", 1, Segment{Seed: 2, Len: 2048}))
	b, err := ingest.DecodeBatch(EncodeBatch(offlineEpoch, rec.events, 0, WireMap), pb.Engine_ENGINE_VLLM)
	if err != nil {
		t.Fatal(err)
	}
	st, err := statestore.Open(t.TempDir(), statestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var recs []*kgo.Record
	offsets := map[string]int64{}
	for _, m := range []proto.Message{
		&pb.WorkerRegistration{WorkerId: "e", Pool: pb.Pool_POOL_DECODE, Model: "m", BlockSize: 16},
		&pb.KvEventRecord{Worker: &pb.WorkerRef{WorkerId: "e"}, EventTimeUnixNano: int64(offlineEpoch * 1e9), Events: b.Events},
	} {
		r, err := events.NewRecord(events.Names{}, events.WorkerKey("e"), m)
		if err != nil {
			t.Fatal(err)
		}
		r.Offset = offsets[r.Topic]
		offsets[r.Topic]++
		r.Timestamp = time.Unix(int64(offlineEpoch), 0)
		recs = append(recs, r)
	}
	if err := st.Apply(recs); err != nil {
		t.Fatal(err)
	}
	chain := a.Chain(16)
	var live []decider.TierOverlap
	st.Read(func(v statestore.View) {
		live = make([]decider.TierOverlap, len(v.Workers()))
		v.MatchPrefix(16, chain, live)
	})
	offline := make([]decider.TierOverlap, 1)
	(&fleetView{engines: []*Engine{e}, workers: []decider.WorkerInfo{{ID: "e", BlockSize: 16}}}).MatchPrefix(16, chain, offline)
	if len(live) != 1 || live[0] != offline[0] || offline[0] != (decider.TierOverlap{Device: 12, Host: 60}) {
		t.Fatalf("router state %+v, offline view %+v; want both {Device:12 Host:60}: the GPU's 12 head blocks, then 60 more in the CPU tier", live, offline)
	}
}

// TestHostTierFleetDeterministic: a fleet with small GPUs and host tiers, on the
// Mooncake sample, loads prefixes from its tiers, computes fewer prompt tokens than
// the same fleet without tiers, reports the loads, and is a pure function of its
// inputs (two runs print the same report).
func TestHostTierFleetDeterministic(t *testing.T) {
	w, err := LoadMooncake("../testdata/mooncake/sample.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	w = w.Head(150)
	p, err := PolicyByName(CondPrefix + "isl_or_load")
	if err != nil {
		t.Fatal(err)
	}
	fc := DefaultFleet()
	fc.NumBlocks = 3000
	none, err := RunOffline(context.Background(), fc, w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	fc.HostKVBytes = 16 << 30
	var reps [2]*Report
	for i := range reps {
		if reps[i], err = RunOffline(context.Background(), fc, w, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := reps[0].String(), reps[1].String(); a != b {
		t.Fatalf("two runs differ:\n%s\n%s", a, b)
	}
	r := reps[0]
	computed := func(r *Report) int64 { return r.PrefillComputedOnPrefill + r.PrefillComputedOnDecode }
	if r.HostHitTokens == 0 || none.HostHitTokens != 0 || computed(r) >= computed(none) || !strings.Contains(r.String(), "host tier ") {
		t.Fatalf("with tiers %d tokens loaded, %d computed; without %d loaded, %d computed:\n%s", r.HostHitTokens, computed(r), none.HostHitTokens, computed(none), r)
	}
	t.Logf("with tiers: %d prompt tokens loaded, %d computed, TTFT p50 %v; without: %d computed, TTFT p50 %v",
		r.HostHitTokens, computed(r), r.TTFT.P50, computed(none), none.TTFT.P50)
}
