package decider

import "fmt"

// Request is one routing question.
//
// Block size is a property of the worker, not of the request, so the request carries one
// hash chain per block size present among the candidates. The caller (the API) hashes the
// prompt once per block-size group, never once per worker.
type Request struct {
	// ID seeds every random or tie-breaking choice, so a request id always gets the same
	// decision from the same state. It should be unique; it may be empty.
	ID    string
	Model string
	// PromptTokens is P, the raw ISL. It counts every prompt token, including a last
	// partial block that has no hash.
	PromptTokens int64
	// Chains holds, per block size, the router hashes of the prompt's complete blocks.
	// A missing block size means "no overlap information" for workers of that size: they
	// get zero overlap and zero shared active blocks.
	Chains []Chain
}

// Chain is the router's XXH3 hash chain of a prompt's complete blocks for one block
// size (design.md, Hashing). It never has an entry for a trailing partial block.
type Chain struct {
	BlockSize int
	Hashes    []uint64
}

// chainFor returns the hashes for a block size, or nil.
func (r *Request) chainFor(blockSize int) []uint64 {
	for i := range r.Chains {
		if r.Chains[i].BlockSize == blockSize {
			return r.Chains[i].Hashes
		}
	}
	return nil
}

// validate rejects requests whose numbers cannot be real: they would otherwise turn into
// silently wrong credits (a chain longer than the prompt would credit tokens that do not
// exist).
func (r *Request) validate() error {
	if r.PromptTokens < 0 {
		return &RequestError{Field: "prompt_tokens", Msg: fmt.Sprintf("is %d; must be ≥ 0", r.PromptTokens)}
	}
	for i := range r.Chains {
		c := &r.Chains[i]
		if c.BlockSize <= 0 {
			return &RequestError{Field: "chains", Msg: fmt.Sprintf("chain %d has block size %d; must be > 0", i, c.BlockSize)}
		}
		if full := r.PromptTokens / int64(c.BlockSize); int64(len(c.Hashes)) > full {
			return &RequestError{Field: "chains", Msg: fmt.Sprintf(
				"chain for block size %d has %d hashes but %d prompt tokens hold only %d complete blocks",
				c.BlockSize, len(c.Hashes), r.PromptTokens, full)}
		}
		for j := 0; j < i; j++ {
			if r.Chains[j].BlockSize == c.BlockSize {
				return &RequestError{Field: "chains", Msg: fmt.Sprintf("block size %d has two chains", c.BlockSize)}
			}
		}
	}
	return nil
}
