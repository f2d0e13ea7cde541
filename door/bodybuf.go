package door

import "sync"

// Request bodies in reused buffers.
//
// At a 1,024-token prompt the client's body and the engine request rendered
// from it are ~13 KiB each, the two largest allocations the door made per
// request; a door's collector runs in proportion to what it allocates, and
// its cycles show in the TTFT tail. Both now live in pooled buffers, each
// given back once nothing refers to its bytes:
//
//   - the client's body when serve returns: the door alone reads it, and
//     what outlives the request (token ids, the model name, error
//     messages) is copied out of it;
//   - an engine request's body when post returns: the engine transport never
//     reads a body after its RoundTrip returns. It writes a plain-http
//     request on the caller's goroutine, and gives net/http's Transport,
//     which serves https engines and may still be writing a body then, a
//     copy of its own (enginetransport.go).

// maxPooledBody is the largest buffer kept for reuse: a rare huge prompt
// must not pin its size in the pool.
const maxPooledBody = 1 << 20

var bodyBuffers = sync.Pool{New: func() any { return new([]byte) }}

// bodyBuffer returns an empty buffer, to be given back with putBodyBuffer.
func bodyBuffer() []byte { return (*bodyBuffers.Get().(*[]byte))[:0] }

// putBodyBuffer gives b back for reuse. The caller must hold no reference
// to its bytes afterwards.
func putBodyBuffer(b []byte) {
	if b == nil || cap(b) > maxPooledBody {
		return
	}
	b = b[:0]
	bodyBuffers.Put(&b)
}
