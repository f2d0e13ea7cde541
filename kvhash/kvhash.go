// Package kvhash computes pdrouter's router block hashes: the content hash
// chain every replica uses to match a prompt against cached blocks, whatever
// hash the engine itself uses (design.md, Hashing).
//
// For a block size B, the prompt's tokens are cut into full blocks of B
// tokens (a trailing partial block is never cached by an engine, so it is
// never hashed). For block i:
//
//	local(i) = XXH3-64(seed 1337, tokens of block i as little-endian u32)
//	chain(0) = local(0)
//	chain(i) = XXH3-64(seed 1337, chain(i-1) as LE u64 || local(i) as LE u64)
//
// chain(i) names the whole prefix up to block i, so two prompts share
// chain(i) exactly when they share their first i+1 blocks. This is the scheme
// NVIDIA Dynamo's router uses, so precomputed hashes can be exchanged.
package kvhash

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// Seed is the XXH3 seed of every router hash.
const Seed = 1337

// maxStackBlock is the largest block (in tokens) hashed from a stack buffer;
// larger blocks fall back to a heap buffer.
const maxStackBlock = 256

// Local hashes the tokens of one block.
func Local(tokens []uint32) uint64 {
	var stack [maxStackBlock * 4]byte
	var buf []byte
	if n := len(tokens) * 4; n <= len(stack) {
		buf = stack[:n]
	} else {
		buf = make([]byte, n)
	}
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[i*4:], t)
	}
	return xxh3.HashSeed(buf, Seed)
}

// Next extends a chain: the hash of the block after parent whose local hash
// is local.
func Next(parent, local uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], parent)
	binary.LittleEndian.PutUint64(b[8:], local)
	return xxh3.HashSeed(b[:], Seed)
}

// Chain appends to dst the chain hashes of every full block of tokens for
// the given block size, continuing from parent when hasParent is true. It
// returns the extended slice; pass a reused dst to avoid allocation.
func Chain(dst []uint64, tokens []uint32, blockSize int, parent uint64, hasParent bool) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	for off := 0; off+blockSize <= len(tokens); off += blockSize {
		h := Local(tokens[off : off+blockSize])
		if hasParent {
			h = Next(parent, h)
		}
		dst = append(dst, h)
		parent, hasParent = h, true
	}
	return dst
}

// Digest is a single hash of a whole chain, used as the request digest in
// decision records.
func Digest(chain []uint64) uint64 {
	h := xxh3.New()
	var b [8]byte
	for _, c := range chain {
		binary.LittleEndian.PutUint64(b[:], c)
		_, _ = h.Write(b[:])
	}
	return h.Sum64()
}
