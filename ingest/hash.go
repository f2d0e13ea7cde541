package ingest

import "encoding/binary"

// HashFromInt normalizes a signed engine hash. Pre-v0.11 vLLM (Python's
// builtin hash) and SGLang publish signed 64-bit values, often negative; the
// two's complement bits are the normalized hash, so the same block hashes
// the same whichever signedness an encoder chose.
func HashFromInt(v int64) uint64 { return uint64(v) }

// HashFromBytes normalizes a byte-string engine hash: the last 8 bytes read
// big-endian. This is exactly the truncation vLLM applies when it publishes
// ints (int.from_bytes(digest, "big") & (2**64-1)), so the bytes mode
// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) and the default int mode give the
// same uint64 for the same block. Shorter strings are read as a big-endian
// number, which is the same rule applied to a zero-padded value.
func HashFromBytes(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b[len(b)-8:])
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}
