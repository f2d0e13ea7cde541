package door

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/pdrouter/pdrouter/internal/rejects"
	"github.com/pdrouter/pdrouter/internal/textcut"
)

// The door asks a decode engine's /tokenize for the prompt's token ids when
// the client sent text or messages: the router hashes the ids into the
// prefix blocks its decision is made on.
//
// The cache keeps the ids of recent prompts, keyed by the model and a
// SHA-256 of the exact bytes the door sends /tokenize (the prompt string's
// JSON, or the messages array's JSON, and which of the two). It is safe
// because:
//   - /tokenize is a deterministic function of the model's tokenizer and
//     those bytes; all workers of a model share the tokenizer (the router's
//     prefix hashing already assumes they do);
//   - the ids only steer the routing decision. The engine is sent the
//     client's own text and tokenizes it itself, so an entry that were ever
//     stale (a model redeployed under the same name with another
//     tokenizer) costs a worse cache-affinity guess, never a wrong answer.
// Entries are bounded by the token ids held in total (LRU eviction), so
// memory does not grow with the prompts clients send.

// tokenizeRequest is vLLM's /tokenize body.
type tokenizeRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt,omitempty"`
	Messages            json.RawMessage `json:"messages,omitempty"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt,omitempty"`
}

type tokenizeResponse struct {
	Count  int      `json:"count"`
	Tokens []uint32 `json:"tokens"`
}

// tokens returns the prompt's token ids, from the cache or from the
// engine at baseURL.
func (d *Door) tokens(ctx context.Context, baseURL string, r *request) ([]uint32, *failure) {
	key := cacheKey(r)
	if ids, ok := d.cache.get(key); ok {
		d.metrics.cache.WithLabelValues("hit").Inc()
		return ids, nil
	}
	d.metrics.cache.WithLabelValues("miss").Inc()
	start := d.cfg.now()
	body := tokenizeRequest{Model: r.model}
	if r.kind == chat {
		yes := true
		body.Messages, body.AddGenerationPrompt = r.prompt, &yes
	} else {
		body.Prompt = r.prompt
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, &failure{err: invalid("invalid_value", "prompt", err.Error())}
	}
	cctx, cancel := context.WithTimeout(ctx, d.cfg.total)
	defer cancel()
	resp, f := d.up.post(cctx, ctx, baseURL+"/tokenize", "", raw)
	if f != nil {
		return nil, f
	}
	// A prompt of n ids is at most ~11n bytes of JSON.
	out, f := d.up.readBody(resp, min(d.cfg.maxRespBytes, int64(d.cfg.maxPromptTokens)*11+4096))
	if f != nil {
		return nil, f
	}
	var tr tokenizeResponse
	if err := json.Unmarshal(out, &tr); err != nil {
		d.metrics.rejects.Inc(rejects.DoorUpstream, reasonMalformedBody)
		return nil, &failure{err: badGateway("upstream_malformed", "the engine's /tokenize answer is not {count, tokens}: "+textcut.Truncate(err.Error(), 200)), retriable: true, code: "upstream_malformed"}
	}
	if len(tr.Tokens) > d.cfg.maxPromptTokens {
		d.metrics.rejects.Inc(rejects.Door, reasonTooManyTokens)
		return nil, &failure{err: invalid("too_many_tokens", promptParam(r), fmt.Sprintf("the prompt is %d tokens; at most %d (--max-prompt-tokens)", len(tr.Tokens), d.cfg.maxPromptTokens)), code: "too_many_tokens"}
	}
	if len(tr.Tokens) == 0 {
		return nil, &failure{err: invalid("invalid_value", promptParam(r), "the prompt tokenizes to no tokens"), code: "invalid_request"}
	}
	d.metrics.tokenize.Observe(d.cfg.now().Sub(start).Seconds())
	d.cache.put(key, tr.Tokens)
	return tr.Tokens, nil
}

func promptParam(r *request) string {
	if r.kind == chat {
		return "messages"
	}
	return "prompt"
}

func cacheKey(r *request) [32]byte {
	h := sha256.New()
	h.Write([]byte(r.model))
	if r.kind == chat {
		h.Write([]byte{0, 'm', 0})
	} else {
		h.Write([]byte{0, 'p', 0})
	}
	h.Write(r.prompt)
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// tokenCache is an LRU of token ids bounded by the ids it holds.
type tokenCache struct {
	mu    sync.Mutex
	max   int
	held  int
	order *list.List // front: most recent; values *cacheEntry
	byKey map[[32]byte]*list.Element
}

type cacheEntry struct {
	key [32]byte
	ids []uint32
}

func newTokenCache(maxTokens int) *tokenCache {
	return &tokenCache{max: maxTokens, order: list.New(), byKey: map[[32]byte]*list.Element{}}
}

// get returns the cached ids; the caller must not modify them.
func (c *tokenCache) get(k [32]byte) ([]uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[k]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cacheEntry).ids, true
}

func (c *tokenCache) put(k [32]byte, ids []uint32) {
	if len(ids) > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[k]; ok {
		return
	}
	c.byKey[k] = c.order.PushFront(&cacheEntry{key: k, ids: ids})
	c.held += len(ids)
	for c.held > c.max {
		last := c.order.Back()
		e := last.Value.(*cacheEntry)
		c.order.Remove(last)
		delete(c.byKey, e.key)
		c.held -= len(e.ids)
	}
}

// len is the number of entries, for tests.
func (c *tokenCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
