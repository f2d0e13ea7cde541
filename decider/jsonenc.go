package decider

import (
	"strconv"

	"github.com/pdrouter/pdrouter/internal/jsonstr"
)

// The canonical encodings (Config and Decision) are written by hand rather than with
// encoding/json: the field order, the float format and the escaping are part of the
// byte-identical contract, and the hot path must not allocate. These helpers append to a
// caller's buffer.

// appendFloat writes f as strconv 'g' with the shortest precision that round-trips, the
// same digits on every platform. Negative zero is written as 0 so that two equal values
// always encode alike. Non-finite values cannot occur in a valid decision; they are
// written as null rather than as invalid JSON.
func appendFloat(b []byte, f float64) []byte {
	if f != f || f > 1.7976931348623157e308 || f < -1.7976931348623157e308 {
		return append(b, "null"...)
	}
	if f == 0 {
		f = 0
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

func appendInt(b []byte, v int64) []byte { return strconv.AppendInt(b, v, 10) }

func appendBool(b []byte, v bool) []byte { return strconv.AppendBool(b, v) }

// appendHex64 writes a 64-bit hash as 16 lower-case hex digits in a JSON string, so that
// JSON readers that hold numbers as doubles do not round it.
func appendHex64(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	b = append(b, '"')
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[(v>>uint(shift))&0xf])
	}
	return append(b, '"')
}

// appendString writes s as a JSON string in the canonical escaping
// (jsonstr.Canonical), valid JSON whatever a client sent as a request id.
func appendString(b []byte, s string) []byte { return jsonstr.Append(b, s, jsonstr.Canonical) }

// appendKey writes `,"key":` (without the comma for the first key of an object).
func appendKey(b []byte, key string, first bool) []byte {
	if !first {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// appendOptFloat writes an OptFloat as its value or null.
func appendOptFloat(b []byte, o OptFloat) []byte {
	if !o.Set {
		return append(b, "null"...)
	}
	return appendFloat(b, o.Value)
}

// jsonObject appends the members of one JSON object, in the order they are
// written: each member is one call, so an encoder reads as its list of keys.
type jsonObject struct {
	b []byte
	n int // members written
}

// openObject starts an object at the end of b.
func openObject(b []byte) jsonObject { return jsonObject{b: append(b, '{')} }

// key writes the member's key (and the comma before every member but the
// first); the caller appends the value to o.b.
func (o *jsonObject) key(k string) {
	o.b = appendKey(o.b, k, o.n == 0)
	o.n++
}

func (o *jsonObject) str(k, v string)          { o.key(k); o.b = appendString(o.b, v) }
func (o *jsonObject) int(k string, v int64)    { o.key(k); o.b = appendInt(o.b, v) }
func (o *jsonObject) bool(k string, v bool)    { o.key(k); o.b = appendBool(o.b, v) }
func (o *jsonObject) hex64(k string, v uint64) { o.key(k); o.b = appendHex64(o.b, v) }
func (o *jsonObject) float(k string, v float64) {
	o.key(k)
	o.b = appendFloat(o.b, v)
}
func (o *jsonObject) optFloat(k string, v OptFloat) {
	o.key(k)
	o.b = appendOptFloat(o.b, v)
}

// close ends the object and returns the buffer.
func (o *jsonObject) close() []byte { return append(o.b, '}') }
