package api

import (
	"encoding/binary"
	"math"
	"math/bits"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// The hot path of POST /v1/route: a route body is mostly one large array of
// numbers (block_hashes or token_ids, up to tens of thousands), which
// encoding/json decodes slowly (reflection and a literal scan per element,
// and hashValue.UnmarshalJSON per hash). fastRouteBody parses the common
// shape of the body by hand instead, and gives up on anything else.
//
// It is a fast path, not a second parser: it succeeds only on bodies whose
// every part it fully understands (the exact field names, no duplicate
// keys, no null, no escapes in strings, plain integers), and then yields
// exactly what encoding/json would. On anything else (including every
// malformed body) it returns false and the caller decodes with decodeJSON
// (encoding/json behind checkKeys), which then accepts the body with the
// same result or rejects it with its precise error. TestFastRouteBodyAgrees
// and FuzzRouteBody check this.

// bodyPool recycles route bodies: they are read, parsed and dropped.
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

type fastScanner struct {
	b []byte
	i int
}

func (s *fastScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *fastScanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *fastScanner) eat(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

// str reads a string without escapes or control characters, valid UTF-8:
// one that encoding/json decodes to the same bytes.
func (s *fastScanner) str() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start, ascii := s.i, true
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			if !ascii && !utf8.Valid(v) {
				return nil, false
			}
			return v, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, false
}

// digits reads [0-9]+ and its value, false on overflow of 64 bits.
func (s *fastScanner) digits() (uint64, int, bool) {
	start := s.i
	var v uint64
	// Eight digits at a time while that stays within 19 digits (which
	// cannot overflow): block hashes are 19-20 digit numbers, and this
	// loop was most of the parse.
	for s.i+8 <= len(s.b) && s.i+8-start <= 19 {
		d, ok := eightDigits(binary.LittleEndian.Uint64(s.b[s.i:]))
		if !ok {
			break
		}
		v = v*100_000_000 + d
		s.i += 8
	}
	// 19 digits cannot overflow; checked arithmetic only beyond.
	for end := min(len(s.b), start+19); s.i < end; s.i++ {
		c := s.b[s.i] - '0'
		if c > 9 {
			return v, s.i - start, s.i > start
		}
		v = v*10 + uint64(c)
	}
	for ; s.i < len(s.b); s.i++ {
		c := s.b[s.i] - '0'
		if c > 9 {
			break
		}
		hi, lo := bits.Mul64(v, 10)
		lo, carry := bits.Add64(lo, uint64(c), 0)
		if hi != 0 || carry != 0 {
			return 0, 0, false
		}
		v = lo
	}
	return v, s.i - start, s.i > start
}

// eightDigits is the value of 8 ASCII digits packed little-endian in x
// (the first digit in the low byte), and false when any byte is not a
// digit. SWAR: every byte is a digit iff its high nibble is 3 and adding 6
// keeps it so; the value is then combined pairwise: 8 digits → 4 numbers
// of 2 → 2 of 4 → 1 of 8, each step one multiply.
func eightDigits(x uint64) (uint64, bool) {
	const hi = 0xF0F0F0F0F0F0F0F0
	if x&hi|(x+0x0606060606060606)&hi>>4 != 0x3333333333333333 {
		return 0, false
	}
	x &= 0x0F0F0F0F0F0F0F0F
	x = (x * (10<<8 + 1)) >> 8 & 0x00FF00FF00FF00FF
	x = (x * (100<<16 + 1)) >> 16 & 0x0000FFFF0000FFFF
	return (x * (10000<<32 + 1)) >> 32, true
}

// uint reads a JSON number that is a plain non-negative integer (no
// fraction, no exponent), at most max.
func (s *fastScanner) uint(max uint64) (uint64, bool) {
	s.ws()
	start := s.i
	v, n, ok := s.digits()
	if !ok || n > 1 && s.b[start] == '0' || v > max {
		return 0, false
	}
	// A fraction or an exponent: not an integer for encoding/json either;
	// let it say so.
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	return v, true
}

// int reads a JSON number that is a plain integer in int64.
func (s *fastScanner) int() (int64, bool) {
	neg := s.peek() == '-'
	if neg {
		s.i++
		if s.i >= len(s.b) || s.b[s.i] < '0' || s.b[s.i] > '9' {
			return 0, false
		}
	}
	v, ok := s.uint(math.MaxInt64)
	if !ok {
		return 0, false
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

// hash reads a block hash as hashValue.UnmarshalJSON accepts it: a plain
// number, or a string of decimal digits or 0x and hex digits.
func (s *fastScanner) hash() (uint64, bool) {
	if s.peek() != '"' {
		return s.uint(math.MaxUint64)
	}
	v, ok := s.str()
	if !ok || len(v) == 0 {
		return 0, false
	}
	if len(v) > 2 && v[0] == '0' && v[1] == 'x' {
		if len(v) > 18 {
			return 0, false
		}
		var h uint64
		for _, c := range v[2:] {
			switch {
			case c >= '0' && c <= '9':
				h = h<<4 | uint64(c-'0')
			case c >= 'a' && c <= 'f':
				h = h<<4 | uint64(c-'a'+10)
			case c >= 'A' && c <= 'F':
				h = h<<4 | uint64(c-'A'+10)
			default:
				return 0, false
			}
		}
		return h, true
	}
	sub := fastScanner{b: v}
	h, n, ok := sub.digits()
	if !ok || n != len(v) {
		return 0, false
	}
	return h, true
}

// hashes reads an array of block hashes (hash) into dst: array, without
// a call per element for the common case of plain numbers.
func (s *fastScanner) hashes(dst []hashValue) ([]hashValue, bool) {
	if !s.eat('[') {
		return nil, false
	}
	if s.eat(']') {
		return dst, true
	}
	for {
		var v uint64
		var ok bool
		if s.i < len(s.b) && s.b[s.i] >= '1' && s.b[s.i] <= '9' {
			var n int
			v, n, ok = s.digits()
			ok = ok && n <= 20 && (s.i >= len(s.b) || s.b[s.i] != '.' && s.b[s.i] != 'e' && s.b[s.i] != 'E')
		} else {
			v, ok = s.hash()
		}
		if !ok {
			return nil, false
		}
		dst = append(dst, hashValue(v))
		if s.i < len(s.b) && s.b[s.i] == ',' {
			s.i++
			continue
		}
		if s.eat(']') {
			return dst, true
		}
		if !s.eat(',') {
			return nil, false
		}
	}
}

// tokens reads an array of token ids: plain JSON integers in
// [0, MaxUint32]. It is array(uint) unrolled into one loop over the bytes,
// for the common `[1,22,333]` spacing: token ids are short numbers, so
// the calls per element and the SWAR attempt of digits (which never finds
// eight digits) were most of the cost: 16k tokens took ~280 µs, now ~130
// (BenchmarkRouteBodyTokens). A SWAR conversion of the short numbers
// measured no faster than this loop. Whitespace around the commas is
// taken too, through the general path.
func (s *fastScanner) tokens(dst []uint32) ([]uint32, bool) {
	if !s.eat('[') {
		return nil, false
	}
	if s.eat(']') {
		return dst, true
	}
	b := s.b
	for {
		if s.i < len(b) && b[s.i]-'0' > 9 {
			s.ws()
		}
		i, start := s.i, s.i
		end := min(len(b), start+11) // 11 digits are too many for uint32
		var v uint64
		for ; i < end; i++ {
			c := b[i] - '0'
			if c > 9 {
				break
			}
			v = v*10 + uint64(c)
		}
		n := i - start
		if n == 0 || n > 10 || n > 1 && b[start] == '0' || v > math.MaxUint32 ||
			i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
			return nil, false
		}
		dst = append(dst, uint32(v))
		if i < len(b) && b[i] == ',' {
			s.i = i + 1
			continue
		}
		s.i = i
		if s.eat(']') {
			return dst, true
		}
		if !s.eat(',') {
			return nil, false
		}
	}
}

// array reads [elem, ...], calling elem for each element.
func (s *fastScanner) array(elem func() bool) bool {
	if !s.eat('[') {
		return false
	}
	if s.eat(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.eat(']') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

// object reads {"key": value, ...}, calling member after each key; member
// reads the value. Duplicate keys are member's to find: it sees every key,
// and knows what it has filled (a set, never a scan of the keys before).
func (s *fastScanner) object(member func(key []byte) bool) bool {
	if !s.eat('{') {
		return false
	}
	if s.eat('}') {
		return true
	}
	for {
		k, ok := s.str()
		if !ok || !s.eat(':') {
			return false
		}
		if !member(k) {
			return false
		}
		if s.eat('}') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

// routeFields are the keys of a route body, by bit, for the fast path's
// duplicate check.
var routeFields = [...]string{"request_id", "model", "lora_name", "block_size", "prompt_tokens",
	"expected_output_tokens", "token_ids", "block_hashes", "after"}

// fastRouteBody fills req from raw when raw is a route body of the common
// shape, exactly as decodeJSON (encoding/json with checkKeys) would, and
// reports whether it did. req must be zero. A duplicate key, or more than
// maxAfter entries in `after`, is not the common shape: decodeJSON then
// says what is wrong.
func fastRouteBody(raw []byte, req *routeRequest, maxAfter int) bool {
	s := &fastScanner{b: raw}
	var seen uint
	ok := s.object(func(key []byte) bool {
		bit := uint(0)
		for i, f := range routeFields {
			if string(key) == f {
				bit = 1 << i
			}
		}
		if bit == 0 || seen&bit != 0 {
			return false // unknown, a name that differs only in case, or a duplicate
		}
		seen |= bit
		switch string(key) {
		case "request_id":
			v, ok := s.str()
			req.RequestID = string(v)
			return ok
		case "model":
			v, ok := s.str()
			req.Model = string(v)
			return ok
		case "lora_name":
			v, ok := s.str()
			name := string(v)
			req.LoraName = &name
			return ok
		case "block_size":
			v, ok := s.int()
			req.BlockSize = int(v)
			return ok
		case "prompt_tokens":
			v, ok := s.int()
			req.PromptTokens = &v
			return ok
		case "expected_output_tokens":
			v, ok := s.int()
			req.ExpectedOutputTokens = &v
			return ok
		case "token_ids":
			var ok bool
			req.TokenIDs, ok = s.tokens(make([]uint32, 0, len(raw)/6+16))
			return ok
		case "block_hashes":
			var ok bool
			req.BlockHashes, ok = s.hashes(make([]hashValue, 0, len(raw)/16))
			return ok
		default: // "after"
			return s.after(req, maxAfter)
		}
	})
	return ok && s.peek() == 0 && s.i == len(s.b)
}

// after reads the `after` vector: at most maxAfter topics and partitions
// together, each key once (the maps being filled are the sets).
func (s *fastScanner) after(req *routeRequest, maxAfter int) bool {
	req.After = map[string]map[string]int64{}
	entries := 0
	return s.object(func(topic []byte) bool {
		if entries++; entries > maxAfter {
			return false
		}
		if _, dup := req.After[string(topic)]; dup {
			return false
		}
		parts := map[string]int64{}
		req.After[string(topic)] = parts
		return s.object(func(p []byte) bool {
			if entries++; entries > maxAfter {
				return false
			}
			if _, dup := parts[string(p)]; dup {
				return false
			}
			v, ok := s.int()
			parts[string(p)] = v
			return ok
		})
	})
}

// maxPooledBody bounds the route bodies kept for reuse: a rare huge body
// is left to the garbage collector.
const maxPooledBody = 1 << 20

// hashesOf is hs as []uint64, without a copy (hashValue is a uint64).
func hashesOf(hs []hashValue) []uint64 {
	if len(hs) == 0 {
		return []uint64{}
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(hs))), len(hs))
}
