package door

import (
	"bytes"
	"encoding/json"
	"math"
)

// scanChunk reads the few fields the door needs of a streamed chunk
// (choices' text, delta content, reasoning content and tool calls;
// usage.completion_tokens; whether it is an error) without decoding it:
// json.Unmarshal allocated for every chunk of every stream. It takes only
// the common, well-formed shape: the data must be valid JSON (json.Valid,
// which does not allocate), keys spelled exactly and each once, every
// field it reads of the type encoding/json would read. Anything else,
// including every error and every chunk to refuse, is left to
// unmarshalChunk (ok false), so what it accepts it reads as encoding/json
// does (FuzzChunkScan checks it on every input).
func scanChunk(data []byte) (c chunk, ok bool) {
	start := skipSpace(data, 0)
	if !json.Valid(data) || data[start] != '{' {
		return c, false
	}
	c.completionTokens = -1
	var hasChoices, hasUsage bool
	seen, nChoices := 0, 0
	okAll := objectFields(data, start, func(key []byte, v []byte) bool {
		name, known := fieldOf(key, chunkFields)
		if !known {
			return name == "" // an unrelated key; a near miss is left
		}
		bit := 1 << fieldIndex(name, chunkFields)
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		switch name {
		case "object":
			// An error object ("object":"error") is left to unmarshalChunk.
			return isNull(v) || (v[0] == '"' && !bytes.Equal(v, []byte(`"error"`)) && !bytes.Contains(v, []byte(`\`)))
		case "error":
			return isNull(v)
		case "message":
			return isNull(v) || v[0] == '"'
		case "choices":
			if isNull(v) {
				return true
			}
			if v[0] != '[' {
				return false
			}
			hasChoices = true
			return arrayElems(v, func(e []byte) bool {
				nChoices++
				if isNull(e) {
					return true
				}
				return e[0] == '{' && scanChoice(e, &c)
			})
		case "usage":
			if isNull(v) {
				return true
			}
			if v[0] != '{' {
				return false
			}
			hasUsage = true
			return scanUsage(v, &c)
		}
		return false
	})
	if !okAll || (!hasChoices && !hasUsage) {
		return chunk{}, false
	}
	if nChoices == 0 {
		c.usageOnly = hasUsage
	}
	return c, true
}

var (
	chunkFields  = []string{"object", "choices", "usage", "error", "message"}
	choiceFields = []string{"text", "delta"}
	deltaFields  = []string{"content", "reasoning_content", "tool_calls"}
	usageFields  = []string{"completion_tokens"}
)

// fieldOf names key among names. known false and name "" is a key
// unrelated to them; known false and name not "" is a near miss (another
// case, an escape, a byte outside ASCII) that encoding/json might match,
// which the caller leaves to it.
func fieldOf(key []byte, names []string) (name string, known bool) {
	if bytes.IndexByte(key, '\\') >= 0 {
		return "?", false
	}
	for _, b := range key {
		if b >= 0x80 {
			return "?", false
		}
	}
	for _, n := range names {
		if string(key) == n {
			return n, true
		}
		if bytes.EqualFold(key, []byte(n)) {
			return "?", false
		}
	}
	return "", false
}

func fieldIndex(name string, names []string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return -1
}

// scanChoice reads one choice object.
func scanChoice(e []byte, c *chunk) bool {
	seen := 0
	return objectFields(e, 0, func(key, v []byte) bool {
		name, known := fieldOf(key, choiceFields)
		if !known {
			return name == ""
		}
		bit := 1 << fieldIndex(name, choiceFields)
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		switch {
		case isNull(v):
			return true
		case name == "text":
			if v[0] != '"' {
				return false
			}
			// A JSON string is empty exactly when its literal is "": any
			// escape stands for at least one character.
			c.token = c.token || len(v) > 2
			return true
		case v[0] != '{':
			return false
		}
		dseen := 0
		return objectFields(v, 0, func(key, dv []byte) bool {
			name, known := fieldOf(key, deltaFields)
			if !known {
				return name == ""
			}
			bit := 1 << fieldIndex(name, deltaFields)
			if dseen&bit != 0 {
				return false
			}
			dseen |= bit
			switch {
			case isNull(dv):
				return true
			case name == "tool_calls":
				if dv[0] != '[' {
					return false
				}
				c.token = c.token || dv[skipSpace(dv, 1)] != ']'

				return true
			case dv[0] != '"':
				return false
			}
			c.token = c.token || len(dv) > 2
			return true
		})
	})
}

// scanUsage reads usage.completion_tokens: an integer literal that fits
// an int64, as encoding/json reads it into one.
func scanUsage(v []byte, c *chunk) bool {
	seen := false
	return objectFields(v, 0, func(key, n []byte) bool {
		name, known := fieldOf(key, usageFields)
		if !known {
			return name == ""
		}
		if seen {
			return false
		}
		seen = true
		if isNull(n) {
			return true
		}
		if n[0] == '-' || !isDigit(n[0]) {
			return false // negative: refused by unmarshalChunk, precisely
		}
		var x int64
		for _, b := range n {
			if !isDigit(b) || x > (math.MaxInt64-int64(b-'0'))/10 {
				return false
			}
			x = x*10 + int64(b-'0')
		}
		c.completionTokens = x
		return true
	})
}

func isNull(v []byte) bool { return len(v) == 4 && string(v) == "null" }

// objectFields calls fn with each key (its literal without quotes) and
// value (its literal) of the object starting at b[i], which json.Valid
// accepted; it stops when fn returns false, and returns false then.
func objectFields(b []byte, i int, fn func(key, v []byte) bool) bool {
	i = skipSpace(b, i+1) // past '{'
	if b[i] == '}' {
		return true
	}
	for {
		ks := i
		ke := skipString(b, ks)
		i = skipSpace(b, ke)
		i = skipSpace(b, i+1) // past ':'
		vs := i
		ve := skipValue(b, vs)
		if !fn(b[ks+1:ke-1], b[vs:ve]) {
			return false
		}
		i = skipSpace(b, ve)
		if b[i] == '}' {
			return true
		}
		i = skipSpace(b, i+1) // past ','
	}
}

// arrayElems calls fn with each element of the valid array v.
func arrayElems(v []byte, fn func(e []byte) bool) bool {
	i := skipSpace(v, 1)
	if v[i] == ']' {
		return true
	}
	for {
		e := skipValue(v, i)
		if !fn(v[i:e]) {
			return false
		}
		i = skipSpace(v, e)
		if v[i] == ']' {
			return true
		}
		i = skipSpace(v, i+1)
	}
}

// skipString returns the index past the string starting at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index past the valid value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) && !(b[i] == ',' || b[i] == '}' || b[i] == ']' || b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
