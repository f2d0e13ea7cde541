package door

import (
	"bytes"
	"fmt"
	"math"
)

var comma = []byte{','}

// tokenIDs reads a prompt given as token ids: a JSON array of integers in
// [0, 2^32). It scans the bytes itself rather than through a
// json.Decoder token by token, which allocated for every id and made a
// long prompt's parse cost milliseconds; it counts as it goes, so a huge
// list is refused at the bound, never decoded whole first. raw is a value
// json.Unmarshal accepted (parseRequest's fields), starting with '['; on
// any other input it refuses without panicking. FuzzTokenIDs holds it to
// json.Decoder's reading.
func tokenIDs(raw []byte, maxTokens int) ([]uint32, *parseError) {
	notIDs := func() *parseError {
		return refuse(reasonInvalidRequest, invalid("invalid_type", "prompt",
			"a list prompt must hold token ids (integers); batched prompts (lists of strings or of lists) are not supported: send one request per prompt"))
	}
	if len(raw) == 0 || raw[0] != '[' {
		return nil, refuse(reasonInvalidRequest, invalid("invalid_type", "prompt", "is not a JSON array"))
	}
	// The capacity is the ids the bytes already read can hold (one more
	// than their commas, which bytes.Count finds without allocating),
	// never a declared size, and at most the bound.
	ids := make([]uint32, 0, min(bytes.Count(raw, comma)+1, maxTokens))
	i := skipSpace(raw, 1)
	if i < len(raw) && raw[i] == ']' {
		return nil, refuse(reasonInvalidRequest, invalid("invalid_value", "prompt", "is empty"))
	}
	for {
		if i >= len(raw) || !(raw[i] == '-' || isDigit(raw[i])) {
			return nil, notIDs()
		}
		j := i
		for j < len(raw) && isNumberByte(raw[j]) {
			j++
		}
		v, ok := parseID(raw[i:j])
		if !ok {
			return nil, refuse(reasonInvalidRequest, invalid("invalid_value", fmt.Sprintf("prompt[%d]", len(ids)), "token ids are integers in [0, 4294967295]"))
		}
		if len(ids) == maxTokens {
			return nil, refuse(reasonTooManyTokens, invalid("too_many_tokens", "prompt", fmt.Sprintf("more than %d token ids (--max-prompt-tokens)", maxTokens)))
		}
		ids = append(ids, v)
		i = skipSpace(raw, j)
		switch {
		case i < len(raw) && raw[i] == ',':
			i = skipSpace(raw, i+1)
		case i < len(raw) && raw[i] == ']':
			return ids, nil
		default:
			return nil, notIDs()
		}
	}
}

// parseID reads an integer literal as json.Number.Int64 would, in
// [0, 2^32): "-0" is 0; a fraction or an exponent is not an integer.
func parseID(b []byte) (uint32, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
		if v > math.MaxUint32 {
			return 0, false
		}
	}
	if neg && v != 0 {
		return 0, false
	}
	return uint32(v), true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isNumberByte: a byte a JSON number may hold.
func isNumberByte(c byte) bool {
	return isDigit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
