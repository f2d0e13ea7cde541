package door

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"testing"
)

// referenceTokenIDs is the prompt ids as encoding/json reads them, token by
// token: what tokenIDs must agree with.
func referenceTokenIDs(raw []byte, maxTokens int) ([]uint32, *parseError) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, refuse(reasonInvalidRequest, invalid("invalid_type", "prompt", ""))
	}
	var ids []uint32
	for dec.More() {
		t, err := dec.Token()
		n, isNum := t.(json.Number)
		if err != nil || !isNum {
			return nil, refuse(reasonInvalidRequest, invalid("invalid_type", "prompt", ""))
		}
		v, perr := n.Int64()
		if perr != nil || v < 0 || v > math.MaxUint32 {
			return nil, refuse(reasonInvalidRequest, invalid("invalid_value", fmt.Sprintf("prompt[%d]", len(ids)), ""))
		}
		if len(ids) == maxTokens {
			return nil, refuse(reasonTooManyTokens, invalid("too_many_tokens", "prompt", ""))
		}
		ids = append(ids, uint32(v))
	}
	if len(ids) == 0 {
		return nil, refuse(reasonInvalidRequest, invalid("invalid_value", "prompt", ""))
	}
	return ids, nil
}

// FuzzTokenIDs: on every JSON array (what parseRequest gives it), the
// scanner takes the same ids as encoding/json, or refuses with the same
// code, param and reason; on anything else it refuses without panicking.
func FuzzTokenIDs(f *testing.F) {
	for _, s := range []string{`[1,2,3]`, `[ 0 , 4294967295 ]`, `[4294967296]`, `[-0]`, `[-1]`, `[1.0]`, `[1e3]`, `[]`,
		`[1,"a"]`, `[[1]]`, `[1,2,3,4,5,6,7,8,9]`, `[1,2,3,4,5,6,7,8,"x"]`, `[99999999999999999999]`, `[null]`, `[true]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		raw = bytes.TrimSpace(raw)
		got, gerr := tokenIDs(raw, 8)
		if !json.Valid(raw) || len(raw) == 0 || raw[0] != '[' {
			return
		}
		want, werr := referenceTokenIDs(raw, 8)
		switch {
		case (gerr == nil) != (werr == nil):
			t.Fatalf("%s: scanner %v %v, encoding/json %v %v", raw, got, gerr, want, werr)
		case gerr != nil && (gerr.Code != werr.Code || gerr.Param != werr.Param || gerr.reason != werr.reason):
			t.Fatalf("%s: scanner refuses %s %s %s, encoding/json %s %s %s", raw, gerr.Code, gerr.Param, gerr.reason, werr.Code, werr.Param, werr.reason)
		case !slices.Equal(got, want):
			t.Fatalf("%s: scanner %v, encoding/json %v", raw, got, want)
		}
	})
}
