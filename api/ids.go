package api

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// crockford is the ULID alphabet: sortable, no ambiguous letters.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newULID returns a 26-character ULID: 48 bits of milliseconds, 80 random
// bits. Ids sort by creation time, which makes decision logs easy to scan.
// Ids are labels, never inputs of a decision.
func newULID(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	var out [26]byte
	// 128 bits → 26 base-32 digits, most significant first.
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
