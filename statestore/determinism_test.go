package statestore

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/testsize"
	"github.com/pdrouter/pdrouter/kvhash"
)

func genRecords(h *harness, seed uint64, n, workers int) []*kgo.Record {
	var recs []*kgo.Record
	for _, e := range newGenerator(seed, workers).events(n) {
		recs = append(recs, h.record(e.key, e.msg))
	}
	return recs
}

func applyInBatches(h *harness, recs []*kgo.Record, rng *rand.Rand) {
	for len(recs) > 0 {
		n := min(1+rng.IntN(300), len(recs))
		h.apply(recs[:n]...)
		recs = recs[n:]
	}
}

// Invariants 1 and 3: the digest is a function of the offset vector. The
// same log applied with partitions interleaved in other orders and other
// batch sizes, after a restart, and into a new store gives one digest.
func TestDigestIndependentOfPartitionOrder(t *testing.T) {
	// Long and self-contained: it runs at the same time as the
	// package's other long tests.
	t.Parallel()
	for seed := uint64(1); seed <= uint64(testsize.Cases(5, 1)); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { digestIndependentOfPartitionOrder(t, seed) })
	}
}

func digestIndependentOfPartitionOrder(t *testing.T, genSeed uint64) {
	digestIndependentOfPartitionOrderWith(t, genSeed, Options{})
}

func digestIndependentOfPartitionOrderWith(t *testing.T, genSeed uint64, o Options) *harness {
	h := newHarnessWith(t, 4, o)
	applyInBatches(h, genRecords(h, genSeed, 3000, 12), rand.New(rand.NewPCG(genSeed, 1)))
	want := h.digest()
	if want.Keys < 100 {
		t.Fatalf("only %d keys: the generator does too little", want.Keys)
	}
	for seed := uint64(1); seed <= 4; seed++ {
		r := replayStore(t, h.log, rand.New(rand.NewPCG(seed, 2)), h.opts)
		got, err := r.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if got.Hash != want.Hash || got.Offsets.String() != want.Offsets.String() {
			d := diffKeys(dumpKeys(t, h.s), dumpKeys(t, r))
			t.Fatalf("interleaving %d: digest %s at %s, want %s at %s\n%d keys differ, first: %v", seed, got, got.Offsets, want, want.Offsets, len(d), d[:min(len(d), 10)])
		}
		_ = r.Close()
	}
	h.reopen()
	if got := h.digest(); got.Hash != want.Hash {
		t.Fatalf("after reopen: %s, want %s", got, want)
	}
	// Delete the store and replay.
	_ = h.s.Close()
	if err := os.RemoveAll(h.dir); err != nil {
		t.Fatal(err)
	}
	h.open()
	log := h.log
	h.log = nil
	applyInBatches(h, log, rand.New(rand.NewPCG(9, 9)))
	if got := h.digest(); got.Hash != want.Hash {
		t.Fatalf("after delete and replay: %s, want %s", got, want)
	}
	return h
}

// Re-delivered records (a batch overlapping what was applied) change
// nothing: they are below the stored offsets.
func TestApplySkipsRedelivery(t *testing.T) {
	h := newHarness(t, 2)
	recs := genRecords(h, 2, 500, 6)
	h.apply(recs[:300]...)
	h.apply(recs[100:]...)
	want := h.digest()
	h2 := newHarness(t, 2)
	h2.apply(recs...)
	if got := h2.digest(); got.Hash != want.Hash {
		t.Fatalf("re-delivery changed the digest: %s vs %s", want, got)
	}
}

// refPrefix is a plain reference model of the prefix-table rules, to check
// the hot index against: maps only, no cleverness.
type refPrefix struct {
	workers map[workerRank]map[uint64]refBlock
}

type refBlock struct {
	router uint64
	tiers  uint8
	orphan bool
}

func (m *refPrefix) apply(env *events.Envelope) {
	if env.Tombstone() {
		for wr := range m.workers {
			if wr.id == string(env.Key) {
				delete(m.workers, wr)
			}
		}
		return
	}
	kv, ok := env.Message.(*pb.KvEventRecord)
	if !ok {
		return
	}
	wr := workerRank{kv.GetWorker().GetWorkerId(), kv.GetWorker().GetDpRank()}
	if m.workers[wr] == nil {
		m.workers[wr] = map[uint64]refBlock{}
	}
	tab := m.workers[wr]
	for _, e := range kv.GetEvents() {
		switch ev := e.GetEvent().(type) {
		case *pb.KvEvent_Stored:
			s := ev.Stored
			if events.IsOffloadStore(s) { // known hashes gain the tier
				for _, h := range s.GetBlockHashes() {
					if b, ok := tab[h]; ok {
						b.tiers |= uint8(1) << normTier(s.GetTier())
						tab[h] = b
					}
				}
				continue
			}
			var parent uint64
			has, orphan := false, false
			if s.ParentBlockHash != nil {
				b, ok := tab[s.GetParentBlockHash()]
				if !ok || b.orphan {
					orphan = true
				} else {
					parent, has = b.router, true
				}
			}
			routers := kvhash.Chain(nil, s.GetTokenIds(), int(s.GetBlockSize()), parent, has)
			bit := uint8(1) << normTier(s.GetTier())
			for i, h := range s.GetBlockHashes() {
				nb := refBlock{orphan: orphan}
				if !orphan {
					nb.router = routers[i]
				}
				old, ok := tab[h]
				if ok && old.orphan == nb.orphan && old.router == nb.router {
					nb.tiers = old.tiers
				}
				nb.tiers |= bit
				tab[h] = nb
			}
		case *pb.KvEvent_Removed:
			bit := uint8(1) << normTier(ev.Removed.GetTier())
			for _, h := range ev.Removed.GetBlockHashes() {
				if b, ok := tab[h]; ok {
					b.tiers &^= bit
					if b.tiers == 0 {
						delete(tab, h)
					} else {
						tab[h] = b
					}
				}
			}
		case *pb.KvEvent_Cleared, *pb.KvEvent_SourceReset:
			clear(tab)
		}
	}
}

func (m *refPrefix) overlap(wr workerRank, chain []uint64) decider.TierOverlap {
	var held [3]map[uint64]bool
	for t := range held {
		held[t] = map[uint64]bool{}
	}
	for _, b := range m.workers[wr] {
		for t := 0; t < 3; t++ {
			if !b.orphan && b.tiers&(1<<t) != 0 {
				held[t][b.router] = true
			}
		}
	}
	run := func(ok func(h uint64) bool) int {
		n := 0
		for n < len(chain) && ok(chain[n]) {
			n++
		}
		return n
	}
	d := run(func(h uint64) bool { return held[0][h] })
	hd := run(func(h uint64) bool { return held[0][h] || held[1][h] })
	a := run(func(h uint64) bool { return held[0][h] || held[1][h] || held[2][h] })
	return decider.TierOverlap{Device: d, Host: hd - d, Disk: a - hd}
}

// The hot index answers like the reference model, for chains that match
// partially, fully, and not at all, before and after a restart.
func TestMatchPrefixAgreesWithModel(t *testing.T) {
	h := newHarness(t, 3)
	// No tombstone-then-kv races in the generator, so applying in log
	// order is also the model's order.
	recs := genRecords(h, 3, 4000, 10)
	model := &refPrefix{workers: map[workerRank]map[uint64]refBlock{}}
	for i, r := range recs {
		env, err := events.Decode(events.Names{}, r)
		if err != nil {
			t.Fatal(err)
		}
		model.apply(env)
		h.apply(r)
		if i%500 == 499 || i == len(recs)-1 {
			checkAgainstModel(t, h, model)
		}
	}
	h.reopen()
	checkAgainstModel(t, h, model)
}

func checkAgainstModel(t *testing.T, h *harness, model *refPrefix) {
	t.Helper()
	for _, bs := range []int{4, 8} {
		for _, text := range []string{"T0", "T1", "T2", "T3", "T4", "T5", "none"} {
			chain := chainOf(text, 40, bs)
			h.s.Read(func(v View) {
				ws := v.Workers()
				dst := make([]decider.TierOverlap, len(ws))
				v.MatchPrefix(bs, chain, dst)
				for i, w := range ws {
					if w.BlockSize != bs {
						continue
					}
					slot := v.st.viewSlots[i]
					want := model.overlap(v.st.workers[slot].wr, chain)
					if dst[i] != want {
						t.Fatalf("%s text %s bs %d: got %+v, model %+v", w.ID, text, bs, dst[i], want)
					}
				}
			})
		}
	}
}

// Readers share the hot index under the read lock: concurrent MatchPrefix
// calls, whose walks take every path (predicted, linked, looked up), must
// not write to it (the race detector checks) and agree with each other.
func TestMatchPrefixConcurrentReaders(t *testing.T) {
	h := newHarness(t, 3)
	for _, r := range genRecords(h, 3, 3000, 11) {
		h.apply(r)
	}
	chains := make([][]uint64, 0, 14)
	for _, bs := range []int{4, 8} {
		for _, text := range []string{"T0", "T1", "T2", "T3", "T4", "T5", "none"} {
			chains = append(chains, chainOf(text, 40, bs))
		}
	}
	want := make([][]decider.TierOverlap, len(chains))
	h.s.Read(func(v View) {
		for i, c := range chains {
			want[i] = make([]decider.TierOverlap, len(v.Workers()))
			v.MatchPrefix(4+4*(i/7), c, want[i])
		}
	})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 200; k++ {
				i := (g + k) % len(chains)
				h.s.Read(func(v View) {
					got := make([]decider.TierOverlap, len(v.Workers()))
					v.MatchPrefix(4+4*(i/7), chains[i], got)
					if !slices.Equal(got, want[i]) {
						t.Errorf("reader %d chain %d: %v, want %v", g, i, got, want[i])
					}
				})
			}
		}()
	}
	wg.Wait()
}

// pdrouter_statestore_prefix_walk_blocks_total counts every block a walk
// visits, by how it was found; after a restart (the arena laid out in chain
// order) a walk looks up only its first and last block.
func TestPrefixWalkMetrics(t *testing.T) {
	h := newHarness(t, 3)
	for _, r := range genRecords(h, 3, 3000, 12) {
		h.apply(r)
	}
	h.reopen()
	steps := func() (p, l, u float64) {
		c := h.s.met.walk
		return testutil.ToFloat64(c.WithLabelValues("predicted")), testutil.ToFloat64(c.WithLabelValues("linked")), testutil.ToFloat64(c.WithLabelValues("looked_up"))
	}
	walked := 0
	h.s.Read(func(v View) {
		for _, bs := range []int{4, 8} {
			for _, text := range []string{"T0", "T1", "T2", "T3", "T4", "T5"} {
				dst := make([]decider.TierOverlap, len(v.Workers()))
				v.MatchPrefix(bs, chainOf(text, 40, bs), dst)
				deepest := 0
				for _, o := range dst {
					deepest = max(deepest, o.Total())
				}
				// The blocks of the longest match, and the one that ended
				// it (unless the whole chain matched).
				walked += min(deepest+1, 40)
			}
		}
	})
	p, l, u := steps()
	if int(p+l+u) != walked {
		t.Fatalf("counted %v predicted + %v linked + %v looked up, walked %d", p, l, u, walked)
	}
	// In chain order, a walk looks up its first block and the block that
	// ends it (absent from the index, or where a shared prefix branches);
	// every block in between is predicted or linked.
	if u > 2*12 {
		t.Errorf("after a rebuild %v of %d blocks were looked up in 12 walks (predicted %v, linked %v)", u, walked, p, l)
	}
}
