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
