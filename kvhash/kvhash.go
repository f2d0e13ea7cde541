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
	"unsafe"

	"github.com/zeebo/xxh3"
)

// Seed is the XXH3 seed of every router hash.
const Seed = 1337

// maxStackBlock is the largest block (in tokens) hashed from a stack buffer;
// larger blocks fall back to a heap buffer.
const maxStackBlock = 256

// Local hashes the tokens of one block.
func Local(tokens []uint32) uint64 {
	if b, ok := leBytes32(tokens); ok {
		return xxh3.HashSeed(b, Seed)
	}
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

// littleEndian: on such hosts (amd64, arm64) the in-memory bytes of a
// []uint32 or []uint64 are already the little-endian encoding the hashes
// are defined over, and are hashed in place, without a copy.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// leBytes32 is the little-endian encoding of v, in place, when the host's
// byte order allows.
func leBytes32(v []uint32) ([]byte, bool) {
	if !littleEndian || len(v) == 0 {
		return nil, false
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*4), true
}

// leBytes64 is leBytes32 for []uint64.
func leBytes64(v []uint64) ([]byte, bool) {
	if !littleEndian || len(v) == 0 {
		return nil, false
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*8), true
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
// decision records of requests sent as block_hashes: XXH3-64 (seed 0) of
// the chain's hashes as little-endian u64.
func Digest(chain []uint64) uint64 {
	if b, ok := leBytes64(chain); ok {
		return xxh3.Hash(b)
	}
	h := xxh3.New()
	var b [8]byte
	for _, c := range chain {
		binary.LittleEndian.PutUint64(b[:], c)
		_, _ = h.Write(b[:])
	}
	return h.Sum64()
}

// TokenDigest is the request digest of a prompt sent as token ids: Local
// of the whole prompt, i.e. XXH3-64 (seed 1337) of its token ids as
// little-endian u32. One pass over the prompt: it was once the Digest of
// a one-token-per-block Chain, two hashes per token and a chain-sized
// allocation, which made it the largest CPU cost of a token_ids request.
func TokenDigest(tokens []uint32) uint64 { return Local(tokens) }
