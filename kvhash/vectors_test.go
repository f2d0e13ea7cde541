package kvhash

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var writeVectors = flag.Bool("write-vectors", false, "rewrite testdata/chains.json from the current implementation")

type vector struct {
	Name      string   `json:"name"`
	BlockSize int      `json:"block_size"`
	Tokens    []uint32 `json:"tokens"`
	Chain     []string `json:"chain"`
}

// TestChainVectors pins the hash chain: testdata/chains.json is also checked
// against the reference C XXH3 by tests/python, so this file ties the Go
// implementation to an independent one. Changing the chain breaks every
// stored prefix table and every client that precomputes hashes.
func TestChainVectors(t *testing.T) {
	path := filepath.Join("testdata", "chains.json")
	if *writeVectors {
		vs := []vector{
			{Name: "two blocks of 4", BlockSize: 4, Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8}},
			{Name: "partial tail ignored", BlockSize: 4, Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
			{Name: "16-token blocks, large ids", BlockSize: 16, Tokens: tokens(48, 127990)},
			{Name: "single block", BlockSize: 16, Tokens: tokens(16, 0)},
		}
		for i := range vs {
			for _, h := range Chain(nil, vs[i].Tokens, vs[i].BlockSize, 0, false) {
				vs[i].Chain = append(vs[i].Chain, fmt.Sprintf("%016x", h))
			}
		}
		b, _ := json.MarshalIndent(vs, "", " ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		got := Chain(nil, v.Tokens, v.BlockSize, 0, false)
		if len(got) != len(v.Chain) {
			t.Fatalf("%s: %d hashes, want %d", v.Name, len(got), len(v.Chain))
		}
		for i, h := range got {
			if s := fmt.Sprintf("%016x", h); s != v.Chain[i] {
				t.Errorf("%s: block %d = %s, want %s", v.Name, i, s, v.Chain[i])
			}
		}
	}
}
