package sim

import (
	"slices"
	"strconv"
	"sync"
	"time"
)

// External requests: what an engine does with a request that came over its HTTP API
// (engineserver.go), on the fleet's loop. Three kinds, as vLLM with NixlConnector:
//
//   - no kv_transfer_params: prefill and decode here (kindLocal);
//   - do_remote_decode: prefill here, sample one token, and hold the prompt's KV
//     for a decode engine to pull (kindPrefill); the answer's kv_transfer_params
//     name this engine and request. vLLM delays freeing those blocks until the
//     consumer has read them or VLLM_NIXL_ABORT_REQUEST_TIMEOUT expires; so does
//     the simulator, in simulated time (RunConfig.KVHoldTimeout);
//   - do_remote_prefill naming a held prefill of this fleet with the same prompt:
//     pull its KV (the fleet's transfer model, queued on this engine's link) and
//     decode without computing the prompt (kindRemote); the prefill engine frees
//     the blocks when the pull completes. Anything else (unknown engine or request,
//     expired, another prompt) is served locally, as vLLM falls back to a local
//     prefill when a transfer fails: never an error.

// DefaultKVHoldTimeout is how long a prefill engine holds KV for a decode engine to
// pull: vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT default, 480 s.
const DefaultKVHoldTimeout = 480 * time.Second

// extReq is one HTTP request on the fleet. Its fields other than sink are touched on
// the loop only.
type extReq struct {
	id   string
	eng  *Engine
	g    *genRequest
	sink *tokenSink
	seq  *seq
	// aborted: the client went away before the request was submitted.
	aborted bool
	// held is the prefill this request pulls from, until the pull completes.
	held *heldKV
}

// heldKey names a held prefill: the engine and the request id it answered with.
type heldKey struct{ engine, request string }

// heldKV is a prefilled prompt whose KV waits for a decode engine.
type heldKV struct {
	key heldKey
	eng *Engine
	seq *seq
}

// tokenSink carries a request's output from the loop to its HTTP handler. The loop
// never blocks on it: it appends under a mutex and signals notify without waiting.
type tokenSink struct {
	mu           sync.Mutex
	tokens       []uint32
	done         bool
	err          error
	promptTokens int
	cachedTokens int
	kv           *KVTransferParams
	notify       chan struct{}
}

func newTokenSink(promptTokens int) *tokenSink {
	return &tokenSink{promptTokens: promptTokens, notify: make(chan struct{}, 1)}
}

func (k *tokenSink) signal() {
	select {
	case k.notify <- struct{}{}:
	default:
	}
}

func (k *tokenSink) add(tok uint32) {
	k.mu.Lock()
	k.tokens = append(k.tokens, tok)
	k.mu.Unlock()
	k.signal()
}

// finish ends the output: kv is the prefill leg's answer (nil otherwise), cached
// the prompt tokens found in the engine's prefix cache.
func (k *tokenSink) finish(kv *KVTransferParams, cached int, err error) {
	k.mu.Lock()
	k.done, k.kv, k.cachedTokens, k.err = true, kv, cached, err
	k.mu.Unlock()
	k.signal()
}

// read returns the tokens from index from on, and whether the output is complete.
func (k *tokenSink) read(from int) (toks []uint32, done bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.tokens[min(from, len(k.tokens)):]), k.done
}

// outcome is the finished output's metadata.
func (k *tokenSink) outcome() (kv *KVTransferParams, cached int, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kv, k.cachedTokens, k.err
}

// startExternal submits x to its engine now (on the loop, at the simulated time of
// its arrival).
func (f *Fleet) startExternal(x *extReq) {
	if x.aborted {
		return
	}
	g := x.g
	r := &Request{ID: x.id, PromptLen: len(g.prompt), OutputLen: g.maxTokens, Output: promptSeed(g.prompt)}
	if g.seed != nil {
		r.Output = *g.seed
	}
	kind := kindLocal
	switch {
	case g.kv != nil && g.kv.DoRemoteDecode:
		kind, r.OutputLen = kindPrefill, 1
	case g.kv != nil && g.kv.DoRemotePrefill:
		if h := f.claimHeld(g.kv, g.prompt); h != nil {
			kind, x.held = kindRemote, h
		}
	}
	s := x.eng.submit(r, kind, slices.Clone(g.prompt))
	s.ext, x.seq = x, s
	x.eng.kick()
	f.updateMetrics(x.eng)
}

// promptSeed seeds a request's output tokens from its prompt, so that the same
// prompt gets the same completion on every engine (the prefill leg's one token is
// the decode leg's first).
func promptSeed(prompt []uint32) uint64 {
	h := uint64(0x5eed)
	for _, t := range prompt {
		h = mix64(h ^ uint64(t))
	}
	return h
}

// claimHeld takes the held prefill kv names, if it is still held and holds the same
// prompt.
func (f *Fleet) claimHeld(kv *KVTransferParams, prompt []uint32) *heldKV {
	if kv.RemoteEngineID == nil || kv.RemoteRequestID == nil {
		return nil
	}
	k := heldKey{engine: *kv.RemoteEngineID, request: *kv.RemoteRequestID}
	h := f.held[k]
	if h == nil || !slices.Equal(h.seq.tokens[:h.seq.promptLen()], prompt) {
		return nil
	}
	delete(f.held, k)
	return h
}

// releaseHeld frees a held prefill's blocks on its engine.
func (f *Fleet) releaseHeld(h *heldKV) {
	h.eng.release(h.seq)
	f.updateMetrics(h.eng)
}

// extPrefillDone: the prefill leg computed its prompt. It samples its one token,
// holds the KV under the request's id until a decode engine pulls it or the hold
// expires, and answers with the kv_transfer_params that name it.
func (f *Fleet) extPrefillDone(e *Engine, s *seq) {
	x := s.ext
	f.countQuery(e, s)
	k := heldKey{engine: e.cfg.ID, request: x.id}
	for n := 2; f.held[k] != nil; n++ { // a reused X-Request-Id: keep both holds
		k.request = x.id + "-" + strconv.Itoa(n)
	}
	h := &heldKV{key: k, eng: e, seq: s}
	if f.held == nil {
		f.held = map[heldKey]*heldKV{}
	}
	f.held[k] = h
	f.q.after(f.holdTimeout(), func() {
		if f.held[k] == h {
			delete(f.held, k)
			f.releaseHeld(h)
		}
	})
	blocks := make([]int64, len(s.blocks))
	for i, b := range s.blocks {
		blocks[i] = int64(b)
	}
	engineID, reqID := e.cfg.ID, k.request
	kv := &KVTransferParams{DoRemotePrefill: true, RemoteBlockIDs: blocks, RemoteEngineID: &engineID,
		RemoteRequestID: &reqID, TPSize: 1}
	if o := f.outs[e]; o != nil && o.host != "" {
		host, port := o.host, o.port
		kv.RemoteHost, kv.RemotePort = &host, &port
	}
	x.sink.add(s.req.OutputToken(0))
	x.sink.finish(kv, s.hitTokens, nil)
}

// externalCounts are the engines' counts of the requests their API served:
// prompt tokens where they were prefilled (a decode leg that pulled its KV
// prefilled nothing), of them the prefix cache hits, and KV pulled.
type externalCounts struct {
	promptTokens, hitTokens, hostHitTokens, transferTokens int64
}

// extTransferStart: a decode leg was admitted; its KV comes from the held prefill
// over this engine's link, and the prefill engine frees it once it arrived.
func (f *Fleet) extTransferStart(e *Engine, s *seq) {
	x := s.ext
	f.external.transferTokens += int64(s.transferTokens)
	done := e.scheduleTransfer(f.timing.Transfer(s.transferTokens))
	f.transfers++
	f.q.at(done, func() {
		f.transfers--
		e.transferDone(s)
		if h := x.held; h != nil {
			x.held = nil
			f.releaseHeld(h)
		}
		f.updateMetrics(e)
	})
}

// abortExternal drops x (its client went away): its seq leaves the engine and its
// blocks are freed; a claimed prefill not yet pulled is freed too.
func (f *Fleet) abortExternal(x *extReq) {
	x.aborted = true
	s := x.seq
	if s == nil {
		return
	}
	if h := x.held; h != nil && s.state == stWaiting {
		x.held = nil
		f.releaseHeld(h)
	}
	if s.state == stHolding {
		return // answered already; the hold ends by a pull or its expiry
	}
	x.eng.abort(s)
	f.updateMetrics(x.eng)
}

func (f *Fleet) holdTimeout() time.Duration {
	if f.kvHold > 0 {
		return f.kvHold
	}
	return DefaultKVHoldTimeout
}
