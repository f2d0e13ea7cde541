// Package ulid makes and reads the ids pdrouter gives requests and
// decisions: ULIDs, 26 characters of Crockford base32 holding 48 bits of
// Unix milliseconds and 80 random bits. An id sorts by its creation time,
// and that time can be read back from the id alone: a decision's record is
// then found on the decisions topic by the time in its id, without an index.
package ulid

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// alphabet is Crockford's base32, as ULIDs spell it: sortable, no
// ambiguous letters.
const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// Len is the length of a ULID, in characters.
const Len = 26

// timeChars is the number of leading characters that hold the time: 10
// characters, 50 bits, of which the top 2 are zero in a 48-bit time.
const timeChars = 10

// The ways Time refuses an id. They are wrapped with where the id breaks
// them; use errors.Is.
var (
	ErrLength   = errors.New("not 26 characters long")
	ErrAlphabet = errors.New("a character outside the ULID alphabet (uppercase Crockford base32: 0-9, A-Z without I, L, O, U)")
	ErrOverflow = errors.New("more than 128 bits: its first character is above 7")
)

// values maps a byte to its base-32 value, or -1 outside the alphabet.
var values = func() (v [256]int8) {
	for i := range v {
		v[i] = -1
	}
	for i := range len(alphabet) {
		v[alphabet[i]] = int8(i)
	}
	return v
}()

// New returns a new ULID stamped with now's Unix millisecond: the time
// Time reads back, for any now from 1970 to the year 10889.
func New(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	var out [Len]byte
	// 128 bits → 26 base-32 digits, most significant first.
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	for i := Len - 1; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// Time returns the time an id was stamped with by New: its Unix
// millisecond. It refuses, with an error wrapping ErrLength, ErrAlphabet or
// ErrOverflow, anything New cannot have made, checking every character:
// lowercase is refused too, as ids are compared byte for byte. The error
// quotes at most one character of id.
func Time(id string) (time.Time, error) {
	if ms, ok := Millis(id); ok {
		return time.UnixMilli(ms), nil
	}
	return time.Time{}, refusal(id)
}

// Millis returns the Unix millisecond of an id New made, and false for
// anything else, as Time refuses it: for callers on a hot path, with no
// error built.
func Millis(id string) (int64, bool) {
	if len(id) != Len || values[id[0]] > 7 {
		return 0, false
	}
	var ms int64
	for i := range Len {
		v := values[id[i]]
		if v < 0 {
			return 0, false
		}
		if i < timeChars {
			ms = ms<<5 | int64(v)
		}
	}
	return ms, true
}

// refusal says why Time refuses id.
func refusal(id string) error {
	if len(id) != Len {
		return fmt.Errorf("%w (%d bytes)", ErrLength, len(id))
	}
	for i := range Len {
		if values[id[i]] < 0 {
			return fmt.Errorf("%w: %q at position %d", ErrAlphabet, id[i], i+1)
		}
	}
	// 26 digits hold 130 bits: a ULID's first digit carries 3 of them.
	return fmt.Errorf("%w (%q)", ErrOverflow, id[0])
}
