package kvhash

import (
	"testing"

	"github.com/zeebo/xxh3"
)

func tokens(n int, start uint32) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = start + uint32(i)
	}
	return t
}

func TestLocalMatchesXXH3OverLittleEndian(t *testing.T) {
	// Tokens 1,2 as LE u32 bytes: 01 00 00 00 02 00 00 00.
	want := xxh3.HashSeed([]byte{1, 0, 0, 0, 2, 0, 0, 0}, 1337)
	if got := Local([]uint32{1, 2}); got != want {
		t.Fatalf("Local = %#x, want %#x", got, want)
	}
	big := tokens(maxStackBlock+1, 7) // heap path
	buf := make([]byte, 0, len(big)*4)
	for _, v := range big {
		buf = append(buf, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	if got, want := Local(big), xxh3.HashSeed(buf, 1337); got != want {
		t.Fatalf("Local(large) = %#x, want %#x", got, want)
	}
}

func TestChainSharedPrefixesShareHashes(t *testing.T) {
	a := tokens(64, 0)
	b := append(tokens(32, 0), tokens(32, 1000)...)
	ca := Chain(nil, a, 16, 0, false)
	cb := Chain(nil, b, 16, 0, false)
	if len(ca) != 4 || len(cb) != 4 {
		t.Fatalf("want 4 blocks each, got %d and %d", len(ca), len(cb))
	}
	for i := 0; i < 2; i++ {
		if ca[i] != cb[i] {
			t.Errorf("block %d of a shared prefix differs", i)
		}
	}
	for i := 2; i < 4; i++ {
		if ca[i] == cb[i] {
			t.Errorf("block %d after the divergence is equal", i)
		}
	}
	// The same block content at another position hashes differently.
	rep := append(tokens(16, 0), tokens(16, 0)...)
	cr := Chain(nil, rep, 16, 0, false)
	if cr[0] == cr[1] {
		t.Error("repeated block content at two positions got one chain hash")
	}
}

func TestChainIgnoresPartialBlockAndContinues(t *testing.T) {
	a := tokens(50, 0)
	full := Chain(nil, a, 16, 0, false)
	if len(full) != 3 {
		t.Fatalf("50 tokens in blocks of 16: want 3 full blocks, got %d", len(full))
	}
	head := Chain(nil, a[:32], 16, 0, false)
	tail := Chain(nil, a[32:48], 16, head[1], true)
	if tail[0] != full[2] {
		t.Fatal("continuing a chain from its parent differs from hashing it whole")
	}
	if got := Chain(nil, a, 0, 0, false); len(got) != 0 {
		t.Fatal("block size 0 must hash nothing")
	}
}

func TestChainDoesNotAllocateWithReusedDst(t *testing.T) {
	a := tokens(16*1000, 0)
	dst := make([]uint64, 0, 1000)
	allocs := testing.AllocsPerRun(10, func() { dst = Chain(dst[:0], a, 16, 0, false) })
	if allocs != 0 {
		t.Fatalf("Chain allocated %.0f times per run", allocs)
	}
}

func BenchmarkChain1000Blocks(b *testing.B) {
	a := tokens(16*1000, 0)
	dst := make([]uint64, 0, 1000)
	b.ReportAllocs()
	b.SetBytes(int64(len(a) * 4))
	for b.Loop() {
		dst = Chain(dst[:0], a, 16, 0, false)
	}
}

// TestByteOrderPaths runs the in-place (little-endian host) and the
// portable encoding paths over the same inputs: they must agree, so a
// big-endian host computes the same hashes.
func TestByteOrderPaths(t *testing.T) {
	toks := tokens(1000, 3)
	chain := Chain(nil, toks, 16, 0, false)
	type result struct{ local, big, digest, tokenDigest uint64 }
	run := func() result {
		return result{Local(toks[:16]), Local(toks), Digest(chain), TokenDigest(toks)}
	}
	inPlace := run()
	saved := littleEndian
	littleEndian = false
	portable := run()
	littleEndian = saved
	if inPlace != portable {
		t.Fatalf("in place %+v, portable %+v", inPlace, portable)
	}
	// Digest is XXH3-64 (seed 0) of the chain as LE u64, streamed or not.
	h := xxh3.New()
	for _, c := range chain {
		_, _ = h.Write([]byte{byte(c), byte(c >> 8), byte(c >> 16), byte(c >> 24), byte(c >> 32), byte(c >> 40), byte(c >> 48), byte(c >> 56)})
	}
	if got, want := Digest(chain), h.Sum64(); got != want {
		t.Fatalf("Digest = %#x, want %#x", got, want)
	}
	if got, want := TokenDigest(toks), Local(toks); got != want {
		t.Fatalf("TokenDigest = %#x, want Local of the prompt %#x", got, want)
	}
	if Digest(nil) != xxh3.Hash(nil) || TokenDigest(nil) != xxh3.HashSeed(nil, Seed) {
		t.Fatal("empty inputs must hash as empty byte strings")
	}
}

// BenchmarkTokenDigest is the request digest of a 16k-token prompt: one
// pass over 64 KiB, no allocation.
func BenchmarkTokenDigest(b *testing.B) {
	toks := tokens(16384, 11)
	b.SetBytes(int64(len(toks) * 4))
	b.ReportAllocs()
	for b.Loop() {
		_ = TokenDigest(toks)
	}
}
