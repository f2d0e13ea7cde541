package sim

import (
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/kvhash"
)

// recorder is an engineHooks that records what an engine did.
type recorder struct {
	q         *eventQueue
	events    []KVEvent
	steps     int
	first     map[string]simTime
	firstStep map[string]int
	done      map[string]simTime
	prefills  []*seq
	e         *Engine
}

func (r *recorder) stepDone(_ *Engine, evs []KVEvent) { r.steps++; r.events = append(r.events, evs...) }
func (r *recorder) prefillDone(_ *Engine, s *seq)     { r.prefills = append(r.prefills, s) }
func (r *recorder) firstToken(_ *Engine, s *seq) {
	r.first[s.req.ID], r.firstStep[s.req.ID] = r.q.now, r.steps+1
}
func (r *recorder) finished(_ *Engine, s *seq) { r.done[s.req.ID] = r.q.now }
func (r *recorder) token(*Engine, *seq)        {}
func (r *recorder) transferStart(e *Engine, s *seq) {
	r.q.after(time.Millisecond, func() { e.transferDone(s) })
}

func testEngine(t *testing.T, pool Pool, blocks, budget int) (*Engine, *recorder) {
	t.Helper()
	rec := &recorder{q: &eventQueue{}, first: map[string]simTime{}, firstStep: map[string]int{}, done: map[string]simTime{}}
	e, err := newEngine(EngineConfig{ID: "e", Pool: pool, Model: "m", BlockSize: 16, NumBlocks: blocks,
		MaxBatchedTokens: budget, MaxNumSeqs: 64, Seed: 7}, NewTiming(DefaultHardware()), rec.q, rec)
	if err != nil {
		t.Fatal(err)
	}
	rec.e = e
	return e, rec
}

func runQueue(q *eventQueue) {
	for {
		ev, ok := q.pop()
		if !ok {
			return
		}
		ev.fn()
	}
}

func segReq(id string, outLen int, segs ...Segment) *Request {
	r := &Request{ID: id, Prompt: segs, OutputLen: outLen, Output: mix64(uint64(len(id)) ^ 99)}
	for _, s := range segs {
		r.PromptLen += s.Len
	}
	return r
}

func kinds(evs []KVEvent) (stored, removed int) {
	for _, e := range evs {
		switch e.Kind {
		case BlockStored:
			stored += len(e.Hashes)
		case BlockRemoved:
			removed += len(e.Hashes)
		}
	}
	return
}

// TestBlockPoolLRUOrder: freed blocks are evicted least recently freed first, a
// request's tail before its head, and a hit on a free block takes it out of the
// eviction order.
func TestBlockPoolLRUOrder(t *testing.T) {
	p := NewBlockPool(4, 2, 3)
	tokA, tokB := []uint32{1, 2, 3, 4}, []uint32{5, 6, 7, 8}
	chA, chB := kvhash.Chain(nil, tokA, 2, 0, false), kvhash.Chain(nil, tokB, 2, 0, false)
	a, _ := p.Allocate(2)
	p.Commit(a, chA, 0, false, tokA)
	p.Free(a)
	b, _ := p.Allocate(2)
	p.Commit(b, chB, 0, false, tokB)
	p.Free(b)
	evs := p.TakeEvents()
	if s, r := kinds(evs); s != 4 || r != 0 || len(evs) != 2 {
		t.Fatalf("events %+v", evs)
	}
	if evs[0].HasParent || evs[0].Tokens[3] != 4 || evs[0].Hashes[1] != p.EngineHash(chA[1]) {
		t.Errorf("stored event %+v", evs[0])
	}
	if p.NumFree() != 4 || p.NumCached() != 4 || p.Usage() != 0 {
		t.Fatalf("free %d cached %d", p.NumFree(), p.NumCached())
	}
	// Free queue: A's tail, A's head, B's tail, B's head.
	if _, ok := p.Allocate(1); !ok {
		t.Fatal("allocate")
	}
	if evs := p.TakeEvents(); len(evs) != 1 || evs[0].Kind != BlockRemoved || evs[0].Hashes[0] != p.EngineHash(chA[1]) {
		t.Fatalf("first eviction %+v, want A's last block", evs)
	}
	// A hit on A's head protects it: the next eviction is B's tail.
	if n := p.Match(chA, 2); n != 1 {
		t.Fatalf("match A = %d, want 1 (its tail was evicted)", n)
	}
	held := p.Acquire(chA, 1)
	if _, ok := p.Allocate(1); !ok {
		t.Fatal("allocate")
	}
	if evs := p.TakeEvents(); len(evs) != 1 || evs[0].Hashes[0] != p.EngineHash(chB[1]) {
		t.Fatalf("second eviction %+v, want B's last block", evs)
	}
	if _, ok := p.Allocate(2); ok {
		t.Fatal("allocated 2 blocks with 1 free")
	}
	p.Free(held)
	if !(p.Reset() == false) {
		t.Fatal("reset succeeded while blocks are held")
	}
}

// TestEnginePrefixHits: a second request sharing a prefix hits exactly its full shared
// blocks, and the engine announces each full block once.
func TestEnginePrefixHits(t *testing.T) {
	e, rec := testEngine(t, PoolDecode, 1000, 8192)
	shared := Segment{Seed: 11, Len: 70} // 4 full blocks + 6 tokens
	r1 := segReq("r1", 3, shared, Segment{Seed: 12, Len: 30})
	s1 := e.submit(r1, kindLocal, r1.Tokens())
	e.kick()
	runQueue(rec.q)
	if s1.hitTokens != 0 || rec.done["r1"] == 0 {
		t.Fatalf("r1 hit %d, done %v", s1.hitTokens, rec.done)
	}
	// 100 prompt + 3 output = 103 tokens: 6 full blocks stored.
	if s, _ := kinds(rec.events); s != 6 {
		t.Errorf("stored %d blocks, want 6", s)
	}
	r2 := segReq("r2", 2, shared, Segment{Seed: 13, Len: 40})
	s2 := e.submit(r2, kindLocal, r2.Tokens())
	e.kick()
	runQueue(rec.q)
	if s2.hitTokens != 64 {
		t.Errorf("r2 hit %d tokens, want 64 (4 shared full blocks)", s2.hitTokens)
	}
	// The same prompt again hits every full block but the one holding the last token.
	r3 := segReq("r3", 1, shared, Segment{Seed: 12, Len: 26}) // 96 tokens = 6 blocks
	s3 := e.submit(r3, kindLocal, r3.Tokens())
	e.kick()
	runQueue(rec.q)
	if s3.hitTokens != 80 {
		t.Errorf("r3 hit %d tokens, want 80 (5 of 6 blocks: the last token is always recomputed)", s3.hitTokens)
	}
}

// TestEngineChunkedPrefill: a prompt longer than the step budget is prefilled over
// several steps, and a decode running alongside gets a token in each of them.
func TestEngineChunkedPrefill(t *testing.T) {
	e, rec := testEngine(t, PoolDecode, 1000, 64)
	long := segReq("long", 1, Segment{Seed: 1, Len: 250})
	e.submit(long, kindLocal, long.Tokens())
	e.kick()
	runQueue(rec.q)
	// 250 tokens in chunks of 64: 4 steps (64, 64, 64, 58), first token at the 4th.
	if rec.steps != 4 {
		t.Errorf("%d steps, want 4", rec.steps)
	}
	if want := NewTiming(DefaultHardware()).Prefill(250, 0, 64); rec.first["long"] != want {
		t.Errorf("TTFT %v, want %v", rec.first["long"], want)
	}
	// A decoding request shares the budget: step 1 prefills the chat's 10 tokens and
	// 54 of the long prompt; steps 2 and 3 give the chat a token each and the long
	// prompt 63 and its last 9.
	e2, rec2 := testEngine(t, PoolDecode, 1000, 64)
	chat := segReq("chat", 50, Segment{Seed: 2, Len: 10})
	l2 := segReq("long", 1, Segment{Seed: 1, Len: 126})
	e2.submit(chat, kindLocal, chat.Tokens())
	s := e2.submit(l2, kindLocal, l2.Tokens())
	e2.kick()
	runQueue(rec2.q)
	if rec2.firstStep["long"] != 3 || rec2.firstStep["chat"] != 1 || s.computed < 126 {
		t.Errorf("first tokens at steps %v, want chat 1 and long 3", rec2.firstStep)
	}
}

// TestTimingMonotone: more uncached tokens take longer (with a quadratic term), and a
// decode step grows with the active KV and with a prefill chunk in the same step.
func TestTimingMonotone(t *testing.T) {
	tm := NewTiming(DefaultHardware())
	prev := time.Duration(0)
	for _, u := range []int{1, 100, 1000, 4000, 8192, 16384, 32768, 65536} {
		d := tm.Prefill(u, 0, 0)
		if d <= prev {
			t.Errorf("prefill of %d tokens %v not longer than the previous %v", u, d, prev)
		}
		prev = d
	}
	// Quadratic: doubling a long prompt more than doubles its compute.
	if a, b := tm.Prefill(32768, 0, 0), tm.Prefill(65536, 0, 0); b <= 2*a-tm.Hardware().StepOverhead {
		t.Errorf("prefill 64k %v ≤ 2 × prefill 32k %v: no quadratic term", b, a)
	}
	// Cached context makes the same uncached tokens dearer (attention to the prefix).
	if a, b := tm.Prefill(2000, 0, 0), tm.Prefill(2000, 30000, 0); b <= a {
		t.Errorf("2000 tokens after 30000 cached %v ≤ from scratch %v", b, a)
	}
	prev = 0
	for _, kv := range []int{0, 10_000, 100_000, 400_000} {
		d := tm.Step(StepShape{Decodes: 32, DecodeContext: kv})
		if d <= prev {
			t.Errorf("decode step with %d KV tokens %v not longer than %v", kv, d, prev)
		}
		prev = d
	}
	base := tm.Step(StepShape{Decodes: 32, DecodeContext: 100_000})
	with := tm.Step(StepShape{Decodes: 32, DecodeContext: 100_000, Chunks: []Chunk{{New: 4096}}})
	if with <= base {
		t.Errorf("a 4096-token local prefill did not slow the decode step: %v vs %v", with, base)
	}
	t.Logf("decode step (32 reqs, 100k KV) %v; with a 4096-token prefill chunk %v; 8k prefill %v; 32k prefill %v; transfer of 8k tokens %v",
		base, with, tm.Prefill(8192, 0, 8192), tm.Prefill(32768, 0, 8192), tm.Transfer(8192))
	if tm.Transfer(2000) <= tm.Transfer(1000) {
		t.Error("transfer does not grow with tokens")
	}
}

// TestPrefillReleaseAdmitsWaiting: a prefill worker whose cache is full of prompts
// waiting to be sent admits the next prompt as soon as one is released (a lost wake-up
// here once left a request waiting forever on an idle engine).
func TestPrefillReleaseAdmitsWaiting(t *testing.T) {
	e, rec := testEngine(t, PoolPrefill, 10, 8192)
	a := segReq("a", 1, Segment{Seed: 1, Len: 120}) // 8 blocks
	b := segReq("b", 1, Segment{Seed: 2, Len: 120})
	sa := e.submit(a, kindPrefill, a.Tokens())
	sb := e.submit(b, kindPrefill, b.Tokens())
	e.kick()
	runQueue(rec.q)
	if len(rec.prefills) != 1 || sa.state != stHolding || sb.state != stWaiting {
		t.Fatalf("prefills %d, a %v, b %v", len(rec.prefills), sa.state, sb.state)
	}
	e.release(sa)
	runQueue(rec.q)
	if len(rec.prefills) != 2 || sb.state != stHolding {
		t.Fatalf("b not prefilled after a was released: %v", sb.state)
	}
}
