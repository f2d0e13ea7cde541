// Package memview is a small in-memory decider.View for tests, benchmarks and the
// simulator, until the statestore's view replaces it. It is deterministic (no map is
// ever iterated) and answers prefix matches in one walk of the chain for all workers, as
// a real index does, so that benchmarks through it measure a realistic cost.
//
// A View is safe for concurrent reads. Mutations must not run concurrently with reads or
// with each other. Methods that take a worker id panic when the id was never added:
// that is a bug in the test that builds the view.
package memview

import (
	"fmt"
	"math/bits"

	"github.com/pdrouter/pdrouter/decider"
)

// Tier is a cache tier, the `medium` of a KV event.
type Tier uint8

const (
	Device Tier = iota // GPU memory
	Host               // CPU memory (offloaded)
	Disk               // local disk or remote storage
)

// View is an in-memory decider.View. Workers keep the ref (index) of their first Add.
type View struct {
	workers []decider.WorkerInfo
	refs    map[decider.WorkerID]int
	loads   []decider.LoadSample
	hasLoad []bool
	active  []decider.ActiveLoad
	// cache holds, per block hash, the workers holding it, one bitset per tier.
	cache *blockIndex
	// activeBlocks holds, per block hash, the workers where it is active.
	activeBlocks *blockIndex
	fit          *decider.LatencyFit
}

var _ decider.View = (*View)(nil)

// New returns an empty view.
func New() *View {
	return &View{
		refs:         map[decider.WorkerID]int{},
		cache:        newBlockIndex(3),
		activeBlocks: newBlockIndex(1),
	}
}

// Add registers a worker, or replaces the registration of a known id (the last
// registration wins, as on the workers topic). It returns the worker's ref.
func (v *View) Add(w decider.WorkerInfo) decider.WorkerRef {
	if ref, ok := v.refs[w.ID]; ok {
		v.workers[ref] = w
		return ref
	}
	ref := len(v.workers)
	v.refs[w.ID] = ref
	v.workers = append(v.workers, w)
	v.loads = append(v.loads, decider.LoadSample{})
	v.hasLoad = append(v.hasLoad, false)
	v.active = append(v.active, decider.ActiveLoad{})
	v.cache.fit(len(v.workers))
	v.activeBlocks.fit(len(v.workers))
	return ref
}

// Ref returns the ref of a worker id.
func (v *View) Ref(id decider.WorkerID) (decider.WorkerRef, bool) {
	ref, ok := v.refs[id]
	return ref, ok
}

func (v *View) mustRef(id decider.WorkerID) int {
	ref, ok := v.refs[id]
	if !ok {
		panic(fmt.Sprintf("memview: unknown worker %q", id))
	}
	return ref
}

// SetLoad records the worker's latest load sample.
func (v *View) SetLoad(id decider.WorkerID, s decider.LoadSample) {
	ref := v.mustRef(id)
	v.loads[ref], v.hasLoad[ref] = s, true
}

// DropLoad forgets the worker's load sample, as when it never sent one.
func (v *View) DropLoad(id decider.WorkerID) {
	ref := v.mustRef(id)
	v.loads[ref], v.hasLoad[ref] = decider.LoadSample{}, false
}

// SetActive sets the router-side active decode blocks and pending prefill tokens.
func (v *View) SetActive(id decider.WorkerID, a decider.ActiveLoad) {
	v.active[v.mustRef(id)] = a
}

// Store records that the worker holds these blocks in a tier. Pass a run of consecutive
// blocks of a chain in order, as a KV "stored" event carries them: the index links
// consecutive blocks to make later walks fast.
func (v *View) Store(id decider.WorkerID, tier Tier, hashes ...uint64) {
	v.cache.set(hashes, int(tier), v.mustRef(id))
}

// Evict records that the worker no longer holds these blocks in a tier.
func (v *View) Evict(id decider.WorkerID, tier Tier, hashes ...uint64) {
	v.cache.unset(hashes, int(tier), v.mustRef(id))
}

// MarkActive records that these blocks are held by requests in flight on the worker.
// Mark a request's whole chain: the shared-block count relies on active blocks being
// prefix-closed per worker, which chained hashes guarantee for whole chains.
func (v *View) MarkActive(id decider.WorkerID, hashes ...uint64) {
	v.activeBlocks.set(hashes, 0, v.mustRef(id))
}

// Workers implements decider.Registry.
func (v *View) Workers() []decider.WorkerInfo { return v.workers }

// Load implements decider.LoadSource.
func (v *View) Load(w decider.WorkerRef) (decider.LoadSample, bool) {
	return v.loads[w], v.hasLoad[w]
}

// Active implements decider.ActiveAccounting.
func (v *View) Active(w decider.WorkerRef) decider.ActiveLoad { return v.active[w] }

// SetLatencyFit sets the latency model fit the view serves (nil: none).
func (v *View) SetLatencyFit(f *decider.LatencyFit) { v.fit = f }

// LatencyFit implements decider.LatencyModel.
func (v *View) LatencyFit() *decider.LatencyFit { return v.fit }

// MatchPrefix implements decider.PrefixIndex with three nested leading runs per worker:
// Device is the run of blocks held on device; the run held on device or host is
// Device+Host; the run held in any tier is Device+Host+Disk. So a block counts in the
// best tier that still continues the run, and a gap in every tier ends it. The walk
// keeps one bitset of live workers per run and stops as soon as no run is live, so it
// costs one step per block of the longest match, whatever the number of workers.
func (v *View) MatchPrefix(blockSize int, chain []uint64, dst []decider.TierOverlap) {
	x := v.cache
	words := x.words
	var stack [3 * 8]uint64
	buf := stack[:0]
	if 3*words <= len(stack) {
		buf = stack[:3*words]
	} else {
		buf = make([]uint64, 3*words)
	}
	liveD, liveH, liveA := buf[:words], buf[words:2*words], buf[2*words:]
	for ref := range v.workers {
		if v.workers[ref].BlockSize == blockSize {
			liveD[ref/64] |= 1 << (uint(ref) % 64)
			// Run lengths, until converted below; a run still live at the end is whole.
			dst[ref] = decider.TierOverlap{Device: len(chain), Host: len(chain), Disk: len(chain)}
		}
	}
	copy(liveH, liveD)
	copy(liveA, liveD)
	prev := int32(-1)
	for i, h := range chain {
		e := x.find(prev, h)
		if e < 0 {
			// No worker holds the block: every live run ends here.
			endRuns(liveA, i, func(ref, i int) { dst[ref].Disk = i })
			endRuns(liveH, i, func(ref, i int) { dst[ref].Host = i })
			endRuns(liveD, i, func(ref, i int) { dst[ref].Device = i })
			break
		}
		if e == prev+1 && prev >= 0 && x.entries[e].sameAsPrev {
			prev = e
			continue // same holders as the block just processed: no run ends here
		}
		prev = e
		base := int(e) * 3 * words
		sets := x.sets[base : base+3*words : base+3*words]
		live := false
		for k := 0; k < words; k++ {
			la := liveA[k]
			if la == 0 { // the runs are nested: nothing live in this word
				continue
			}
			d := sets[k]
			if la&^d == 0 {
				// Every live run continues on device, the common case deep in a
				// shared prefix: the runs are nested, so none of them changes.
				live = true
				continue
			}
			hd := d | sets[words+k]
			a := hd | sets[2*words+k]
			for ended := liveD[k] &^ d; ended != 0; ended &= ended - 1 {
				dst[k*64+bits.TrailingZeros64(ended)].Device = i
			}
			for ended := liveH[k] &^ hd; ended != 0; ended &= ended - 1 {
				dst[k*64+bits.TrailingZeros64(ended)].Host = i
			}
			for ended := la &^ a; ended != 0; ended &= ended - 1 {
				dst[k*64+bits.TrailingZeros64(ended)].Disk = i
			}
			liveD[k] &= d
			liveH[k] &= hd
			liveA[k] = la & a
			live = live || liveA[k] != 0
		}
		if !live {
			break
		}
	}
	for ref := range v.workers {
		if v.workers[ref].BlockSize == blockSize {
			o := dst[ref]
			dst[ref] = decider.TierOverlap{Device: o.Device, Host: o.Host - o.Device, Disk: o.Disk - o.Host}
		}
	}
}

// MatchActive implements decider.ActiveAccounting: the leading run of chain active on
// each worker, found in one walk like MatchPrefix.
func (v *View) MatchActive(blockSize int, chain []uint64, dst []int) {
	x := v.activeBlocks
	words := x.words
	var stack [8]uint64
	live := stack[:0]
	if words <= len(stack) {
		live = stack[:words]
	} else {
		live = make([]uint64, words)
	}
	for ref := range v.workers {
		if v.workers[ref].BlockSize == blockSize {
			live[ref/64] |= 1 << (uint(ref) % 64)
			dst[ref] = len(chain)
		}
	}
	prev := int32(-1)
	for i, h := range chain {
		e := x.find(prev, h)
		if e < 0 {
			endRuns(live, i, func(ref, i int) { dst[ref] = i })
			break
		}
		if e == prev+1 && prev >= 0 && x.entries[e].sameAsPrev {
			prev = e
			continue
		}
		prev = e
		set := x.sets[int(e)*words : int(e)*words+words]
		any := false
		for k := 0; k < words; k++ {
			if live[k] == 0 {
				continue
			}
			a := set[k]
			for ended := live[k] &^ a; ended != 0; ended &= ended - 1 {
				dst[k*64+bits.TrailingZeros64(ended)] = i
			}
			live[k] &= a
			any = any || live[k] != 0
		}
		if !any {
			break
		}
	}
}

// endRuns calls end(ref, i) for every worker still live in the bitset.
func endRuns(live []uint64, i int, end func(ref, i int)) {
	for k, w := range live {
		for ; w != 0; w &= w - 1 {
			end(k*64+bits.TrailingZeros64(w), i)
		}
	}
}
