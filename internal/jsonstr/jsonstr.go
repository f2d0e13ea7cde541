// Package jsonstr writes JSON strings into a caller's buffer, for the
// hand-written encoders of the hot path (the decider's canonical
// encodings, the route response). It exists once so that both escape the
// same way where they must, and differ only where a contract says so.
package jsonstr

import "unicode/utf8"

// Escaping chooses between the two byte contracts this project writes.
type Escaping struct {
	// HTML escapes <, > and & as \u003c, \u003e and \u0026, as
	// encoding/json does by default.
	HTML bool
	// ShortBF writes backspace and form feed as \b and \f (encoding/json
	// since Go 1.22) rather than \u0008 and \u000c.
	ShortBF bool
}

var (
	// Canonical is the decider's canonical encoding (config and decision
	// JSON, whose bytes are hashed and compared): fixed, never to change.
	Canonical = Escaping{}
	// EncodingJSON is encoding/json's default output.
	EncodingJSON = Escaping{HTML: true, ShortBF: true}
)

const hex = "0123456789abcdef"

// Append writes s as a JSON string. Both escapings escape '"', '\\' and
// control characters (\n \r \t by name, the others as \u00XX unless
// ShortBF names \b and \f), write U+2028 and U+2029 as \u2028 and \u2029,
// and replace each byte of invalid UTF-8 with \ufffd, so the output is
// valid JSON whatever a client sent.
func Append(b []byte, s string, e Escaping) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!e.HTML || (c != '<' && c != '>' && c != '&')) {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b' && e.ShortBF:
				b = append(b, '\\', 'b')
			case c == '\f' && e.ShortBF:
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
