package sim

import (
	"fmt"
	"time"

	"github.com/pdrouter/pdrouter/kvhash"
)

// Pool is the pool a worker serves in, as it registers with the router.
type Pool string

const (
	PoolPrefill Pool = "prefill"
	PoolDecode  Pool = "decode"
)

// EngineConfig describes one simulated engine.
type EngineConfig struct {
	ID    string
	Pool  Pool
	Model string
	// BlockSize and NumBlocks size the KV cache (vLLM --block-size and the profiled
	// num_gpu_blocks).
	BlockSize int
	NumBlocks int
	// MaxBatchedTokens is the per-step token budget (--max-num-batched-tokens);
	// MaxNumSeqs caps the running batch (--max-num-seqs).
	MaxBatchedTokens int
	MaxNumSeqs       int
	// HostBlocks sizes the host-memory (CPU) KV tier in blocks of BlockSize tokens;
	// 0: no tier (hosttier.go).
	HostBlocks int
	// Seed makes the engine's published block hashes its own, as vLLM's per-process
	// NONE_HASH does.
	Seed uint64
}

func (c EngineConfig) validate() error {
	if c.ID == "" || (c.Pool != PoolPrefill && c.Pool != PoolDecode) {
		return fmt.Errorf("engine %q: need an id and pool prefill or decode", c.ID)
	}
	if c.BlockSize <= 0 || c.NumBlocks <= 0 || c.MaxBatchedTokens <= 0 || c.MaxNumSeqs <= 0 {
		return fmt.Errorf("engine %s: block size, blocks, max batched tokens and max seqs must be > 0", c.ID)
	}
	if c.HostBlocks < 0 {
		return fmt.Errorf("engine %s: host tier blocks %d must be ≥ 0", c.ID, c.HostBlocks)
	}
	return nil
}

// seqKind is what an engine does with a request.
type seqKind uint8

const (
	// kindLocal: prefill here, then decode here (aggregated, or the bypass).
	kindLocal seqKind = iota
	// kindPrefill: prefill here for another worker; hold the KV until it is sent.
	kindPrefill
	// kindRemote: receive the prompt's KV from a prefill worker, then decode here.
	kindRemote
)

type seqState uint8

const (
	stWaiting seqState = iota
	stPrefilling
	stTransferring
	stLoading // waiting for a prefix's KV from the host tier
	stDecoding
	stHolding // prefill done, KV not yet sent
	stDone
)

// seq is one request on one engine.
type seq struct {
	req    *Request
	kind   seqKind
	state  seqState
	tokens []uint32 // prompt, then generated tokens
	chain  []uint64 // router chain hashes of the full blocks of tokens
	blocks []int32
	// computed tokens have KV; committed leading blocks were offered to the cache.
	computed, committed int
	// hitTokens came from this engine's prefix cache at admission; hostHitTokens
	// followed them from its host tier (loaded, not recomputed).
	hitTokens, hostHitTokens int
	// stored leading blocks were offered to the host tier.
	stored int
	// reserve blocks are set aside for the tokens still to be generated.
	reserve   int
	generated int
	// transferTokens is the KV a remote seq receives.
	transferTokens int
	admitted       simTime
	firstToken     simTime
	lastToken      simTime
	// ext is the HTTP request this seq serves (nil for a workload request).
	ext *extReq
}

func (s *seq) promptLen() int { return s.req.PromptLen }

// engineHooks are the fleet's callbacks, all on the simulation goroutine.
type engineHooks interface {
	// stepDone reports a finished step, with the KV events it produced (possibly none).
	stepDone(e *Engine, events []KVEvent)
	// prefillDone: a kindPrefill seq has its KV; the fleet sends it on.
	prefillDone(e *Engine, s *seq)
	// firstToken: a seq produced its first output token (its TTFT).
	firstToken(e *Engine, s *seq)
	// finished: a seq produced its last token and left the engine.
	finished(e *Engine, s *seq)
	// transferStart: a kindRemote seq was admitted and needs transferTokens of KV.
	transferStart(e *Engine, s *seq)
	// token: a seq produced an output token (the last of s.tokens).
	token(e *Engine, s *seq)
}

// Engine is one simulated vLLM worker: a waiting queue, a running batch, a KV block
// pool with prefix caching, and a scheduler that runs one step at a time.
//
// Scheduling follows vLLM V1's shape: each step first gives every decoding request one
// token and every partly prefilled request its next chunk, then admits waiting
// requests in arrival order while the step's token budget and the KV cache allow
// (first come, first served: a request that does not fit blocks the ones behind it).
// A prefill is split into chunks of at most the remaining budget (chunked prefill).
//
// Simplification: admission sets aside every block the request will need (prompt and
// output), so a running request is never preempted. vLLM allocates lazily and preempts
// by recomputation when memory runs out; reserving makes the same load wait in the
// queue instead, which shows up as TTFT rather than as recomputation.
type Engine struct {
	cfg    EngineConfig
	timing Timing
	pool   *BlockPool
	host   *HostTier // nil: no host tier
	q      *eventQueue
	hooks  engineHooks

	waiting  []*seq
	running  []*seq // admission order
	reserved int    // blocks set aside for running seqs' future tokens
	busy     bool

	// stats, in simulated time
	steps      int
	busyTime   time.Duration
	prefilled  int // tokens computed by prefill chunks
	linkFreeAt simTime
	// hostLinkFreeAt is when the host-to-GPU link is free; loading counts the host
	// loads under way.
	hostLinkFreeAt simTime
	loading        int
}

func newEngine(cfg EngineConfig, timing Timing, q *eventQueue, hooks engineHooks) (*Engine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, timing: timing, pool: NewBlockPool(cfg.NumBlocks, cfg.BlockSize, mix64(cfg.Seed^0x656e67)), q: q, hooks: hooks}
	if cfg.HostBlocks > 0 {
		e.host = NewHostTier(cfg.HostBlocks, e.pool.EngineHash)
	}
	return e, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() EngineConfig { return e.cfg }

// Pool returns the engine's KV block pool (read it on the simulation goroutine only).
func (e *Engine) Pool() *BlockPool { return e.pool }

// HostTier returns the engine's host tier, nil without one (read it on the
// simulation goroutine only).
func (e *Engine) HostTier() *HostTier { return e.host }

// takeEvents returns the KV events since the last call: the GPU pool's, then the host
// tier's, as vLLM appends its connector's events to the KV cache manager's.
func (e *Engine) takeEvents() []KVEvent {
	evs := e.pool.TakeEvents()
	if e.host != nil {
		evs = append(evs, e.host.TakeEvents()...)
	}
	return evs
}

// Load is the engine's current load, as its /metrics would report it.
type Load struct {
	Running, Waiting int
	KVUsage          float64
	UsedBlocks       int
	// PrefillTokens is the prompt work queued or in progress (tokens not yet computed).
	PrefillTokens int
}

// Load reports the engine's current load.
func (e *Engine) Load() Load {
	l := Load{Running: len(e.running), Waiting: len(e.waiting), KVUsage: e.pool.Usage(),
		UsedBlocks: e.pool.NumBlocks() - e.pool.NumFree()}
	for _, s := range e.running {
		if s.state == stPrefilling || s.state == stLoading {
			l.PrefillTokens += s.promptLen() - s.computed
		}
	}
	for _, s := range e.waiting {
		if s.kind != kindRemote {
			l.PrefillTokens += s.promptLen()
		}
	}
	return l
}

// submit queues a request of a kind. tokens is the prompt (the engine keeps it). The
// caller registers the returned seq, then calls kick: admission may call hooks that
// look the seq up.
func (e *Engine) submit(r *Request, kind seqKind, tokens []uint32) *seq {
	s := &seq{req: r, kind: kind, tokens: tokens, chain: kvhash.Chain(nil, tokens, e.cfg.BlockSize, 0, false)}
	e.waiting = append(e.waiting, s)
	return s
}

// kick starts a step if the engine is idle and has work.
func (e *Engine) kick() {
	if !e.busy {
		e.startStep()
	}
}

// admit tries to admit the head of the waiting queue. It returns false when the request
// does not fit (KV blocks or the running cap).
func (e *Engine) admit(s *seq) bool {
	if len(e.running) >= e.cfg.MaxNumSeqs {
		return false
	}
	B, P := e.cfg.BlockSize, s.promptLen()
	promptBlocks := ceilDiv(P, B)
	// vLLM recomputes at least the last prompt token, so a local prefill can hit at
	// most (P−1)/B blocks; a remote seq receives all KV and can use every full block.
	maxHit := (P - 1) / B
	if s.kind == kindRemote {
		maxHit = P / B
	}
	hits := e.pool.Match(s.chain, max(maxHit, 0))
	// A seq that prefills here may load the blocks after the GPU hits from the host
	// tier; a remote seq receives its KV from the prefill worker instead.
	hostHits := 0
	if e.host != nil && s.kind != kindRemote {
		hostHits = e.host.Match(s.chain, hits, max(maxHit, 0)-hits)
	}
	growth := 0
	if s.kind != kindPrefill {
		growth = ceilDiv(P+s.req.OutputLen, B) - promptBlocks
	}
	need := e.pool.FreeAmongHits(s.chain, hits) + promptBlocks - hits + growth
	if need > e.pool.NumFree()-e.reserved {
		return false
	}
	s.blocks = e.pool.Acquire(s.chain, hits)
	fresh, ok := e.pool.Allocate(promptBlocks - hits)
	if !ok {
		panic("sim: admission check passed but allocation failed")
	}
	s.blocks = append(s.blocks, fresh...)
	s.reserve = growth
	e.reserved += growth
	s.hitTokens = hits * B
	s.computed = s.hitTokens
	s.committed = hits
	s.admitted = e.q.now
	e.running = append(e.running, s)
	if e.host != nil {
		e.host.Touch(s.chain)
	}
	if hostHits > 0 {
		e.startLoad(s, hits, hostHits)
		return true
	}
	if s.kind == kindRemote {
		s.state = stTransferring
		s.transferTokens = P - s.hitTokens
		e.hooks.transferStart(e, s)
	} else {
		s.state = stPrefilling
	}
	return true
}

// startLoad loads a seq's blocks [from, from+n) from the host tier, as vLLM's
// offloading connector does: the blocks are allocated, the seq waits until the KV
// has crossed the host link (bytes ÷ bandwidth, loads into one engine queued), and
// then prefills the rest of its prompt. Blocks loaded this way are not offered to the
// host tier again.
func (e *Engine) startLoad(s *seq, from, n int) {
	B := e.cfg.BlockSize
	s.hostHitTokens = n * B
	s.computed = (from + n) * B
	s.stored = from + n
	s.state = stLoading
	blocks := s.chain[from : from+n]
	e.host.Acquire(blocks)
	start := max(e.q.now, e.hostLinkFreeAt)
	e.hostLinkFreeAt = start + e.timing.HostLoad(n*B)
	e.loading++
	e.q.at(e.hostLinkFreeAt, func() {
		e.loading--
		e.host.Release(blocks)
		if s.state == stDone { // aborted while loading
			return
		}
		// The loaded blocks enter the GPU prefix cache, as vLLM caches them.
		e.commit(s)
		s.state = stPrefilling
		e.kick()
	})
}

// scheduleTransfer books the engine's receive link for a transfer of d and returns
// when it completes. Transfers into one worker share its NIC, so they queue.
func (e *Engine) scheduleTransfer(d time.Duration) simTime {
	start := max(e.q.now, e.linkFreeAt)
	e.linkFreeAt = start + d
	return e.linkFreeAt
}

// transferDone: the seq's KV arrived; its prompt blocks enter the cache and it joins
// the decoding batch.
func (e *Engine) transferDone(s *seq) {
	if s.state == stDone { // aborted while its KV was on the way
		return
	}
	s.computed = s.promptLen()
	e.commit(s)
	s.state = stDecoding
	e.kick()
}

// release frees a held prefill seq once its KV was sent; the freed blocks may admit
// a waiting request, so the engine looks again.
func (e *Engine) release(s *seq) {
	e.finish(s)
	e.kick()
}

type scheduled struct {
	s     *seq
	chunk int // prefill tokens this step; 0 for a decode
}

func (e *Engine) startStep() {
	budget := e.cfg.MaxBatchedTokens
	var work []scheduled
	var shape StepShape
	for _, s := range e.running {
		if budget == 0 {
			break
		}
		switch s.state {
		case stDecoding:
			// The next token may need a new block, taken from the seq's reserve.
			if len(s.tokens) >= len(s.blocks)*e.cfg.BlockSize {
				ids, ok := e.pool.Allocate(1)
				if !ok {
					panic("sim: reserved block unavailable")
				}
				s.blocks = append(s.blocks, ids...)
				s.reserve--
				e.reserved--
			}
			work = append(work, scheduled{s: s})
			shape.Decodes++
			shape.DecodeContext += len(s.tokens)
			budget--
		case stPrefilling:
			n := min(s.promptLen()-s.computed, budget)
			work = append(work, scheduled{s: s, chunk: n})
			shape.Chunks = append(shape.Chunks, Chunk{New: n, Context: s.computed})
			budget -= n
		}
	}
	for len(e.waiting) > 0 && budget > 0 {
		s := e.waiting[0]
		if !e.admit(s) {
			break
		}
		e.waiting = e.waiting[1:]
		if s.state == stPrefilling {
			n := min(s.promptLen()-s.computed, budget)
			work = append(work, scheduled{s: s, chunk: n})
			shape.Chunks = append(shape.Chunks, Chunk{New: n, Context: s.computed})
			budget -= n
		}
	}
	if len(work) == 0 {
		e.busy = false
		if evs := e.takeEvents(); len(evs) > 0 {
			e.hooks.stepDone(e, evs)
		}
		return
	}
	d := e.timing.Step(shape)
	e.busy = true
	e.steps++
	e.busyTime += d
	e.q.after(d, func() { e.endStep(work) })
}

func (e *Engine) endStep(work []scheduled) {
	now := e.q.now
	for _, w := range work {
		s := w.s
		if s.state == stDone { // aborted during the step
			continue
		}
		if w.chunk > 0 {
			s.computed += w.chunk
			e.prefilled += w.chunk
			e.commit(s)
			if s.computed < s.promptLen() {
				continue
			}
			if s.kind == kindPrefill {
				s.state = stHolding
				e.hooks.prefillDone(e, s)
				continue
			}
			// The step that completes a prefill samples the first token.
			s.state = stDecoding
			e.emitToken(s, now)
			continue
		}
		e.emitToken(s, now)
	}
	e.hooks.stepDone(e, e.takeEvents())
	e.busy = false
	e.kick()
}

// emitToken appends the seq's next output token at time now.
func (e *Engine) emitToken(s *seq, now simTime) {
	s.tokens = append(s.tokens, s.req.OutputToken(s.generated))
	s.generated++
	s.computed = len(s.tokens)
	s.lastToken = now
	e.hooks.token(e, s)
	if s.generated == 1 {
		s.firstToken = now
		e.hooks.firstToken(e, s)
	}
	if len(s.tokens)%e.cfg.BlockSize == 0 {
		B := e.cfg.BlockSize
		blk := s.tokens[len(s.tokens)-B:]
		h := kvhash.Local(blk)
		if n := len(s.chain); n > 0 {
			h = kvhash.Next(s.chain[n-1], h)
		}
		s.chain = append(s.chain, h)
		e.commit(s)
	}
	if s.generated >= s.req.OutputLen {
		e.finish(s)
		e.hooks.finished(e, s)
	}
}

// commit offers the seq's newly full, computed blocks to the prefix cache.
func (e *Engine) commit(s *seq) {
	full := min(s.computed/e.cfg.BlockSize, len(s.chain), len(s.blocks))
	if full <= s.committed {
		return
	}
	B := e.cfg.BlockSize
	var parent uint64
	if s.committed > 0 {
		parent = s.chain[s.committed-1]
	}
	e.pool.Commit(s.blocks[s.committed:full], s.chain[s.committed:full], parent, s.committed > 0, s.tokens[s.committed*B:full*B])
	s.committed = full
	if e.host != nil && full > s.stored {
		// Write-through: the blocks not yet offered go to the host tier (which skips
		// those it holds), and the seq's blocks become its most recently used.
		e.host.Store(s.chain[s.stored:full], B)
		s.stored = full
		e.host.Touch(s.chain[:full])
	}
}

// abort drops a seq wherever it is (its client went away): a waiting seq leaves the
// queue, a running or holding one is finished and its blocks freed, and a step or
// transfer under way skips it when it ends. The freed blocks may admit a waiting
// request, so the engine looks again.
func (e *Engine) abort(s *seq) {
	if s.state == stDone {
		return
	}
	for i, w := range e.waiting {
		if w == s {
			e.waiting = append(e.waiting[:i], e.waiting[i+1:]...)
			s.state = stDone
			s.tokens, s.chain = nil, nil
			return
		}
	}
	e.finish(s)
	if !e.busy {
		e.kick()
	}
}

// finish removes a seq from the running batch and frees its blocks.
func (e *Engine) finish(s *seq) {
	for i, r := range e.running {
		if r == s {
			e.running = append(e.running[:i], e.running[i+1:]...)
			break
		}
	}
	e.pool.Free(s.blocks)
	s.blocks = nil
	e.reserved -= s.reserve
	s.reserve = 0
	s.state = stDone
	s.tokens, s.chain = nil, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
