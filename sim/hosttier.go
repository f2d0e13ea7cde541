package sim

// HostTier is an engine's host-memory (CPU) KV tier, modelled on vLLM's
// OffloadingConnector with its CPU backend and LRU manager, which vLLM v0.11.0
// introduced (vllm/v1/kv_offload/lru_manager.py; the connector's scheduler side and
// its events as read in vllm-project/vllm at commit
// 0072b0b7443bdddf17824c78d4feae8e1fc12fb4):
//
//   - write-through: every full block the engine computes is copied to the tier as it
//     enters the GPU prefix cache, unless the tier holds it already. vLLM stores each
//     step's new blocks asynchronously, off the request's path, so a store costs no
//     simulated time (PCIe is full duplex: stores do not slow the loads either);
//   - the tier holds a fixed number of blocks. Storing into a full tier evicts the
//     least recently used blocks that no load is reading, announced as one
//     BlockRemoved of medium CPU per store; a store that cannot make room is skipped,
//     as vLLM skips it;
//   - stored blocks are announced as BlockStored of medium CPU, in the same batch as
//     the step's GPU events (vLLM appends the connector's events to the scheduler's),
//     in vLLM's shape: empty token_ids and no parent. The router resolves such blocks
//     through the engine hash → router hash table the GPU stores built
//     (docs/kv-event-formats.md, section 6);
//   - looking a request up touches its blocks, last block first, so that a prefix's
//     head is the most recently used and its tail is evicted first;
//   - the engine loads a prefix the GPU misses but the tier holds instead of
//     recomputing it (engine.go): the request waits for the load, other requests keep
//     stepping.
//
// Blocks are keyed by the router's chain hash, like the GPU pool, and published with
// the GPU pool's EngineHash: vLLM offloads a block under the block hash it has on the
// GPU (for equal block sizes), so both tiers name one block alike.
type HostTier struct {
	capacity int
	hash     func(uint64) uint64
	index    map[uint64]int32
	key      []uint64
	ref      []int32 // loads reading the block; such a block is not evicted
	lru      idList  // over slots, least recently used at head
	free     []int32 // slots of evicted blocks, reused before new ones
	pending  []KVEvent
}

// NewHostTier returns an empty tier of capacity blocks whose events name blocks by
// hash (the engine's EngineHash). Slots are allocated as blocks arrive, so a large,
// mostly empty tier costs little memory.
func NewHostTier(capacity int, hash func(uint64) uint64) *HostTier {
	return &HostTier{capacity: capacity, hash: hash, index: map[uint64]int32{}, lru: newIDList(0)}
}

// Capacity is the tier's size in blocks.
func (t *HostTier) Capacity() int { return t.capacity }

// Len is the number of blocks the tier holds.
func (t *HostTier) Len() int { return len(t.index) }

// Holds reports whether the tier holds the block of chain hash h.
func (t *HostTier) Holds(h uint64) bool {
	_, ok := t.index[h]
	return ok
}

// Match returns how many blocks of chain the tier holds in a row from chain[from], at
// most maxBlocks. It changes nothing.
func (t *HostTier) Match(chain []uint64, from, maxBlocks int) int {
	n := 0
	for from+n < len(chain) && n < maxBlocks {
		if _, ok := t.index[chain[from+n]]; !ok {
			break
		}
		n++
	}
	return n
}

// Touch makes chain's held blocks the most recently used, its first block most of
// all: they are moved to the tail last block first.
func (t *HostTier) Touch(chain []uint64) {
	for i := len(chain) - 1; i >= 0; i-- {
		if id, ok := t.index[chain[i]]; ok {
			t.lru.unlink(id)
			t.lru.pushTail(id)
		}
	}
}

// Acquire protects chain's blocks (all held: Match said so) from eviction while a
// load reads them; Release ends that.
func (t *HostTier) Acquire(chain []uint64) {
	for _, h := range chain {
		t.ref[t.index[h]]++
	}
}

// Release drops the protection Acquire took.
func (t *HostTier) Release(chain []uint64) {
	for _, h := range chain {
		if id, ok := t.index[h]; ok && t.ref[id] > 0 {
			t.ref[id]--
		}
	}
}

// Store copies the blocks of chain that the tier lacks into it, blocks of blockSize
// tokens. It evicts least recently used blocks to make room, or stores nothing when
// the blocks no load reads are too few. Each contiguous run of stored blocks is one
// BlockStored of medium CPU, without tokens or parent, as vLLM's connector sends it.
func (t *HostTier) Store(chain []uint64, blockSize int) {
	// What to store is decided before evicting, as vLLM does: a block of chain that
	// the eviction takes is lost, not stored again.
	store := make([]bool, len(chain))
	missing := 0
	for i, h := range chain {
		if !t.Holds(h) {
			store[i] = true
			missing++
		}
	}
	if missing == 0 || !t.evict(len(t.index)+missing-t.capacity) {
		return
	}
	runStart := -1
	flush := func(end int) {
		if runStart < 0 {
			return
		}
		ev := KVEvent{Kind: BlockStored, BlockSize: blockSize, Medium: MediumCPU}
		for _, h := range chain[runStart:end] {
			ev.Hashes = append(ev.Hashes, t.hash(h))
		}
		t.pending = append(t.pending, ev)
		runStart = -1
	}
	for i, h := range chain {
		if !store[i] {
			flush(i)
			continue
		}
		t.insert(h)
		if runStart < 0 {
			runStart = i
		}
	}
	flush(len(chain))
}

// evict frees n slots, least recently used first, skipping blocks a load reads. It
// evicts nothing and returns false when fewer than n blocks can go.
func (t *HostTier) evict(n int) bool {
	if n <= 0 {
		return true
	}
	victims := make([]int32, 0, n)
	for id := t.lru.head; id >= 0 && len(victims) < n; id = t.lru.next[id] {
		if t.ref[id] == 0 {
			victims = append(victims, id)
		}
	}
	if len(victims) < n {
		return false
	}
	ev := KVEvent{Kind: BlockRemoved, Medium: MediumCPU, Hashes: make([]uint64, 0, n)}
	for _, id := range victims {
		ev.Hashes = append(ev.Hashes, t.hash(t.key[id]))
		delete(t.index, t.key[id])
		t.lru.unlink(id)
		t.free = append(t.free, id)
	}
	t.pending = append(t.pending, ev)
	return true
}

// insert places block h at the most recent end, in a free slot or a new one.
func (t *HostTier) insert(h uint64) {
	var id int32
	if n := len(t.free); n > 0 {
		id, t.free = t.free[n-1], t.free[:n-1]
	} else {
		id = int32(len(t.key))
		t.key, t.ref = append(t.key, 0), append(t.ref, 0)
		t.lru.grow()
	}
	t.key[id], t.ref[id] = h, 0
	t.index[h] = id
	t.lru.pushTail(id)
}

// TakeEvents returns the events since the last call, in order.
func (t *HostTier) TakeEvents() []KVEvent {
	ev := t.pending
	t.pending = nil
	return ev
}
