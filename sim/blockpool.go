package sim

// KVEventKind is the kind of a KV cache event, as vLLM names them.
type KVEventKind uint8

const (
	// BlockStored: full blocks entered the prefix cache.
	BlockStored KVEventKind = iota + 1
	// BlockRemoved: cached blocks were evicted (their memory was reused).
	BlockRemoved
	// AllBlocksCleared: the prefix cache was reset.
	AllBlocksCleared
)

// KVEvent is one engine KV cache event. Hashes are the engine's own block hashes
// (EngineHash), not the router's.
type KVEvent struct {
	Kind KVEventKind
	// Hashes of the blocks, in prefix order for BlockStored.
	Hashes []uint64
	// Parent is the hash of the block before Hashes[0]; HasParent is false for the
	// first block of a sequence.
	Parent    uint64
	HasParent bool
	// Tokens are the stored blocks' token ids, len(Hashes)·BlockSize of them.
	Tokens    []uint32
	BlockSize int
	// Medium is the tier the event is about, as vLLM names it: "" is the GPU prefix
	// cache (published as MediumGPU), MediumCPU the host tier (hosttier.go).
	Medium string
}

// The media the simulated engine publishes (vLLM's kv_offload mediums).
const (
	MediumGPU = "GPU"
	MediumCPU = "CPU"
)

// BlockPool is an engine's KV cache: a fixed number of blocks of BlockSize tokens, and a
// prefix cache over them, with vLLM's semantics:
//
//   - a block enters the cache only when it is full, keyed by the hash of its whole
//     prefix (the chain hash), and is announced then (BlockStored);
//   - a block whose last user finished stays cached but becomes free: it joins the
//     tail of the free queue. Requests free their blocks last block first, so a
//     sequence's tail is evicted before its head, which other requests are likelier
//     to share;
//   - allocation takes the head of the free queue (the least recently freed block); if
//     that block is cached, it is evicted and announced (BlockRemoved);
//   - a cache hit on a free block takes it out of the free queue (LRU touch);
//   - a reset forgets every cached block (AllBlocksCleared).
//
// The cache is keyed by the router's chain hash (kvhash), which names the same content
// exactly; the engine publishes EngineHash of it, a per-engine bijection, so that the
// hashes on the wire differ from the router's as real engines' do.
type BlockPool struct {
	blockSize int
	seed      uint64
	ref       []int32
	key       []uint64
	cached    []bool
	index     map[uint64]int32
	free      idList // the free queue, over block ids
	inFree    []bool
	numFree   int
	pending   []KVEvent
}

// NewBlockPool returns a pool of numBlocks empty blocks, all free. seed makes this
// engine's published hashes its own.
func NewBlockPool(numBlocks, blockSize int, seed uint64) *BlockPool {
	p := &BlockPool{
		blockSize: blockSize, seed: seed,
		ref: make([]int32, numBlocks), key: make([]uint64, numBlocks), cached: make([]bool, numBlocks),
		index: map[uint64]int32{},
		free:  newIDList(numBlocks), inFree: make([]bool, numBlocks),
	}
	for i := range numBlocks {
		p.pushTail(int32(i))
	}
	return p
}

// BlockSize is tokens per block.
func (p *BlockPool) BlockSize() int { return p.blockSize }

// NumBlocks is the pool's capacity.
func (p *BlockPool) NumBlocks() int { return len(p.ref) }

// NumFree is the number of blocks no request holds (cached or empty).
func (p *BlockPool) NumFree() int { return p.numFree }

// NumCached is the number of blocks in the prefix cache.
func (p *BlockPool) NumCached() int { return len(p.index) }

// Usage is vLLM's kv_cache_usage_perc: the fraction of blocks held by requests.
func (p *BlockPool) Usage() float64 {
	if len(p.ref) == 0 {
		return 0
	}
	return 1 - float64(p.numFree)/float64(len(p.ref))
}

// EngineHash is the hash this engine publishes for a block whose router chain hash is
// h: a bijective 64-bit mix of h with the engine's seed (SplitMix64's finalizer).
func (p *BlockPool) EngineHash(h uint64) uint64 { return mix64(h ^ p.seed) }

// Match returns how many leading blocks of chain are cached, at most maxBlocks. It
// changes nothing.
func (p *BlockPool) Match(chain []uint64, maxBlocks int) int {
	n := 0
	for n < len(chain) && n < maxBlocks {
		if _, ok := p.index[chain[n]]; !ok {
			break
		}
		n++
	}
	return n
}

// FreeAmongHits is how many of the first hits cached blocks of chain are free, i.e.
// would leave the free queue if acquired. Admission needs it: a hit on a free block
// uses up a free block just as an allocation does.
func (p *BlockPool) FreeAmongHits(chain []uint64, hits int) int {
	n := 0
	for _, h := range chain[:hits] {
		if p.ref[p.index[h]] == 0 {
			n++
		}
	}
	return n
}

// Acquire takes a reference on the first hits cached blocks of chain (which Match
// reported) and returns their ids.
func (p *BlockPool) Acquire(chain []uint64, hits int) []int32 {
	ids := make([]int32, 0, hits)
	for _, h := range chain[:hits] {
		id := p.index[h]
		if p.ref[id] == 0 {
			p.unlink(id)
		}
		p.ref[id]++
		ids = append(ids, id)
	}
	return ids
}

// Allocate takes n blocks from the head of the free queue, evicting cached ones (one
// BlockRemoved event per allocation call, listing every evicted block). It returns
// false, allocating nothing, when fewer than n blocks are free.
func (p *BlockPool) Allocate(n int) ([]int32, bool) {
	if n > p.numFree {
		return nil, false
	}
	ids := make([]int32, 0, n)
	var evicted []uint64
	for range n {
		id := p.free.head
		p.unlink(id)
		if p.cached[id] {
			delete(p.index, p.key[id])
			p.cached[id] = false
			evicted = append(evicted, p.EngineHash(p.key[id]))
		}
		p.ref[id] = 1
		ids = append(ids, id)
	}
	if len(evicted) > 0 {
		p.pending = append(p.pending, KVEvent{Kind: BlockRemoved, Hashes: evicted})
	}
	return ids, true
}

// Commit enters full blocks into the cache: ids[i] holds the block whose chain hash
// is chain[i], and tokens holds their token ids (len(ids)·BlockSize). parent is the
// chain hash of the block before ids[0] (hasParent false at the start of a sequence).
// A block whose hash is already cached (another request computed the same content
// concurrently) is not entered twice; it stays an uncached block of its request.
// Each contiguous run of newly cached blocks is one BlockStored event.
func (p *BlockPool) Commit(ids []int32, chain []uint64, parent uint64, hasParent bool, tokens []uint32) {
	runStart := -1
	flush := func(end int) {
		if runStart < 0 {
			return
		}
		ev := KVEvent{Kind: BlockStored, BlockSize: p.blockSize,
			Tokens: append([]uint32(nil), tokens[runStart*p.blockSize:end*p.blockSize]...)}
		for _, h := range chain[runStart:end] {
			ev.Hashes = append(ev.Hashes, p.EngineHash(h))
		}
		if runStart > 0 {
			ev.Parent, ev.HasParent = p.EngineHash(chain[runStart-1]), true
		} else if hasParent {
			ev.Parent, ev.HasParent = p.EngineHash(parent), true
		}
		p.pending = append(p.pending, ev)
		runStart = -1
	}
	for i, id := range ids {
		h := chain[i]
		if _, dup := p.index[h]; dup || p.cached[id] {
			flush(i)
			continue
		}
		p.index[h], p.key[id], p.cached[id] = id, h, true
		if runStart < 0 {
			runStart = i
		}
	}
	flush(len(ids))
}

// Free drops a reference on each block, last block first, so that the free queue
// evicts the sequence's tail before its head.
func (p *BlockPool) Free(ids []int32) {
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		if p.ref[id]--; p.ref[id] == 0 {
			p.pushTail(id)
		}
	}
}

// Reset empties the prefix cache, as vLLM's reset_prefix_cache does. Like vLLM it
// refuses (returns false) while any request holds blocks.
func (p *BlockPool) Reset() bool {
	if p.numFree != len(p.ref) {
		return false
	}
	clear(p.index)
	clear(p.cached)
	p.pending = append(p.pending, KVEvent{Kind: AllBlocksCleared})
	return true
}

// TakeEvents returns the events since the last call, in order.
func (p *BlockPool) TakeEvents() []KVEvent {
	ev := p.pending
	p.pending = nil
	return ev
}

// CachedChainHashes returns every cached block's router chain hash, in block id order
// (for tests and the offline view's consistency checks).
func (p *BlockPool) CachedChainHashes() []uint64 {
	var out []uint64
	for id, c := range p.cached {
		if c {
			out = append(out, p.key[id])
		}
	}
	return out
}

func (p *BlockPool) pushTail(id int32) {
	p.free.pushTail(id)
	p.inFree[id] = true
	p.numFree++
}

func (p *BlockPool) unlink(id int32) {
	if !p.inFree[id] {
		return
	}
	p.free.unlink(id)
	p.inFree[id] = false
	p.numFree--
}

// mix64 is SplitMix64's finalizer: a bijection on 64-bit values with good avalanche.
// (Constants from Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014.)
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
