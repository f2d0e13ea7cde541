package api

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

var fastBodySeeds = []string{
	`{"request_id":"r1","model":"m","block_hashes":[1,2,18446744073709551615],"block_size":16,"prompt_tokens":48}`,
	`{"block_hashes":["0x1f","0xFFFFFFFFFFFFFFFF","007","12"],"block_size":16,"prompt_tokens":64,"after":{"kv-events":{"0":5,"3":7},"load":{}}}`,
	` { "token_ids" : [ 1 , 2 ,3 ] , "lora_name" : "sql" , "expected_output_tokens" : -5 } `,
	"{\"token_ids\":[0],\n\"model\":\"m\u00e9\"}\n",
	`{"token_ids":[]}`,
	`{}`,
	`{"token_ids":[1],"prompt_tokens":-0,"block_size":-3}`,
	// Everything below must go to encoding/json (or be rejected by it).
	`{"token_ids":[1,-2]}`,
	`{"token_ids":[4294967296]}`,
	`{"token_ids":[1.0]}`,
	`{"token_ids":[1e3]}`,
	`{"token_ids":[01]}`,
	`{"token_ids":null}`,
	`{"lora_name":null,"token_ids":[1]}`,
	`{"Token_IDs":[1]}`,
	`{"token_ids":[1],"token_ids":[2,3]}`,
	`{"after":{"load":{"0":1}},"after":{"kv-events":{"1":2}},"token_ids":[1]}`,
	`{"after":{"load":{"0":1,"0":2}},"token_ids":[1]}`,
	`{"request_id":"a\"b","token_ids":[1]}`,
	`{"request_id":"a\u0062","token_ids":[1]}`,
	"{\"request_id\":\"\xff\",\"token_ids\":[1]}",
	"{\"request_id\":\"a\tb\",\"token_ids\":[1]}",
	`{"block_hashes":["zz"],"block_size":16,"prompt_tokens":20}`,
	`{"block_hashes":["0x"],"block_size":16,"prompt_tokens":20}`,
	`{"block_hashes":["0X1f"],"block_size":16,"prompt_tokens":20}`,
	`{"block_hashes":["+1"],"block_size":16,"prompt_tokens":20}`,
	`{"block_hashes":[18446744073709551616],"block_size":16,"prompt_tokens":20}`,
	`{"block_hashes":["18446744073709551616"],"block_size":16,"prompt_tokens":20}`,
	`{"block_hashes":["0x00000000000000001"],"block_size":16,"prompt_tokens":20}`,
	`{"block_hashes":[-1],"block_size":16,"prompt_tokens":20}`,
	`{"prompt_tokens":-9223372036854775808,"token_ids":[1]}`,
	`{"prompt_tokens":9223372036854775808,"token_ids":[1]}`,
	`{"token_ids":[1]} {}`,
	`{"token_ids":[1]}x`,
	`{"token_ids":[1],}`,
	`{"token_ids":[1,]}`,
	`{"token_ids":[1]`,
	`[1]`,
	``,
	`{"temperature":1,"token_ids":[1]}`,
	`{"block_size":"16"}`,
	`{"block_size":16.5}`,
	`{"after":{"load":{"0":1.5}}}`,
	`{"after":[]}`,
	`{"token_ids":[1],"model":1}`,
}

// checkFastBody: when the fast path takes a body, encoding/json (the
// strict decoder) accepts it too and yields the same request.
func checkFastBody(t *testing.T, body string) {
	t.Helper()
	var fast routeRequest
	if !fastRouteBody([]byte(body), &fast, 1024) {
		return
	}
	var slow routeRequest
	if err := decodeJSON([]byte(body), 1<<30, &slow); err != nil {
		t.Fatalf("fast path took %q, encoding/json rejects it: %v", body, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("body %q:\nfast %+v\njson %+v", body, fast, slow)
	}
}

func TestFastRouteBodyAgrees(t *testing.T) {
	took := 0
	for _, body := range fastBodySeeds {
		checkFastBody(t, body)
		var r routeRequest
		if fastRouteBody([]byte(body), &r, 1024) {
			took++
		}
	}
	if took != 7 {
		t.Fatalf("fast path took %d of the 7 plain bodies", took)
	}
	// Random bodies of the bench's shape, with random mutations.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		var b strings.Builder
		fmt.Fprintf(&b, `{"request_id":"bench-%d","model":"bench","block_hashes":[`, i)
		for j := 0; j < rng.IntN(50); j++ {
			if j > 0 {
				b.WriteString(",")
			}
			switch rng.IntN(3) {
			case 0:
				fmt.Fprintf(&b, "%d", rng.Uint64())
			case 1:
				fmt.Fprintf(&b, `"%d"`, rng.Uint64())
			default:
				fmt.Fprintf(&b, `"0x%x"`, rng.Uint64())
			}
		}
		fmt.Fprintf(&b, `],"block_size":16,"prompt_tokens":%d,"after":{"kv-events":{"0":%d}}}`, rng.IntN(1000), rng.IntN(1000))
		body := []byte(b.String())
		checkFastBody(t, string(body))
		for m := 0; m < 3; m++ {
			mut := append([]byte(nil), body...)
			mut[rng.IntN(len(mut))] = "{}[],:\"0123456789-.eExn \\"[rng.IntN(25)]
			checkFastBody(t, string(mut))
		}
	}
}

// TestFastRouteBodyTokensAgree: random token_ids bodies (numbers of every
// length up to and past uint32, spacing, and mutations) decode as
// encoding/json decodes them, or go to it.
func TestFastRouteBodyTokensAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	spaces := []string{"", "", "", " ", "\n", "\t "}
	took := 0
	for i := 0; i < 3000; i++ {
		var b strings.Builder
		b.WriteString(`{"token_ids":[`)
		for j := 0; j < rng.IntN(40); j++ {
			if j > 0 {
				b.WriteString(spaces[rng.IntN(len(spaces))] + "," + spaces[rng.IntN(len(spaces))])
			}
			switch rng.IntN(4) {
			case 0:
				fmt.Fprintf(&b, "%d", rng.IntN(10))
			case 1:
				fmt.Fprintf(&b, "%d", rng.Uint32())
			case 2:
				fmt.Fprintf(&b, "%d", uint64(math.MaxUint32)+uint64(rng.IntN(3))-1)
			default:
				fmt.Fprintf(&b, "%d", rng.Uint64()>>rng.IntN(64))
			}
		}
		b.WriteString(`],"model":"m"}`)
		body := b.String()
		checkFastBody(t, body)
		var r routeRequest
		if fastRouteBody([]byte(body), &r, 1024) {
			took++
		}
		for m := 0; m < 3; m++ {
			mut := []byte(body)
			mut[rng.IntN(len(mut))] = "{}[],:\"0123456789-.eExn \\"[rng.IntN(25)]
			checkFastBody(t, string(mut))
		}
	}
	// A quarter of the numbers overflow or start a body that holds one,
	// so most bodies go to encoding/json; the rest must take the fast path.
	if took < 300 {
		t.Fatalf("the fast path took %d of 3000 bodies", took)
	}
	t.Logf("the fast path took %d of 3000 bodies", took)
}

func FuzzFastRouteBody(f *testing.F) {
	for _, s := range fastBodySeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) { checkFastBody(t, body) })
}

// BenchmarkRouteBody: decoding a bench api body (2,048 block hashes).
func BenchmarkRouteBody(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	hs := make([]uint64, 2048)
	for i := range hs {
		hs[i] = rng.Uint64()
	}
	raw, _ := json.Marshal(map[string]any{"request_id": "bench-1", "model": "bench", "block_hashes": hs, "block_size": 16,
		"prompt_tokens": 32768, "after": map[string]any{"kv-events": map[string]any{"0": 100, "1": 200}, "workers": map[string]any{"0": 3}}})
	b.SetBytes(int64(len(raw)))
	b.Run("encoding-json", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var r routeRequest
			if err := decodeJSON(raw, 1<<30, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fast", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var r routeRequest
			if !fastRouteBody(raw, &r, 1024) {
				b.Fatal("not taken")
			}
		}
	})
}

// BenchmarkRouteBodyTokens: decoding a body of 16,384 token ids.
func BenchmarkRouteBodyTokens(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	toks := make([]uint32, 16384)
	for i := range toks {
		toks[i] = rng.Uint32N(128000)
	}
	raw, _ := json.Marshal(map[string]any{"request_id": "bench-1", "model": "bench", "token_ids": toks,
		"after": map[string]any{"kv-events": map[string]any{"0": 100, "1": 200}, "workers": map[string]any{"0": 3}}})
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		var r routeRequest
		if !fastRouteBody(raw, &r, 1024) {
			b.Fatal("not taken")
		}
	}
}

// TestEightDigits checks the SWAR digit block against strconv on every
// kind of block: all digits, and one byte of each other value at each
// position.
func TestEightDigits(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for range 20000 {
		var b [8]byte
		for i := range b {
			b[i] = '0' + byte(rng.IntN(10))
		}
		want, _ := strconv.ParseUint(string(b[:]), 10, 64)
		if got, ok := eightDigits(binary.LittleEndian.Uint64(b[:])); !ok || got != want {
			t.Fatalf("%q: %d, %v; want %d", b, got, ok, want)
		}
		for c := 0; c < 256; c++ {
			if c >= '0' && c <= '9' {
				continue
			}
			bad := b
			bad[rng.IntN(8)] = byte(c)
			if _, ok := eightDigits(binary.LittleEndian.Uint64(bad[:])); ok {
				t.Fatalf("%q accepted as digits", bad)
			}
		}
	}
	// The whole number: 8-digit blocks, the 19-digit limit, overflow.
	for _, c := range []struct {
		in   string
		want uint64
		n    int
		ok   bool
	}{
		{"12345678,", 12345678, 8, true},
		{"1234567812345678]", 1234567812345678, 16, true},
		{"1234567890123456789", 1234567890123456789, 19, true},
		{"18446744073709551615", math.MaxUint64, 20, true},
		{"18446744073709551616", 0, 0, false},
		{"99999999999999999999", 0, 0, false},
		{"1234567:", 1234567, 7, true},
		{"00000000012", 12, 11, true},
	} {
		s := fastScanner{b: []byte(c.in)}
		v, n, ok := s.digits()
		if ok != c.ok || ok && (v != c.want || n != c.n) {
			t.Errorf("digits(%q) = %d, %d, %v; want %d, %d, %v", c.in, v, n, ok, c.want, c.n, c.ok)
		}
	}
}
