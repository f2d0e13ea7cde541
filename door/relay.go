package door

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/pdrouter/pdrouter/internal/rejects"
	"github.com/pdrouter/pdrouter/internal/textcut"
)

// maxHeldChunks bounds the chunks held back before the first token (a
// chat stream's role chunk): held, they let a failure before the first
// token still be retried, as the client has seen nothing.
const maxHeldChunks = 16

// relayStream relays an engine's event stream chunk by chunk, checking
// each, and measures its tokens (when each is read: the client gets it
// before the door waits for the engine again).
func (d *Door) relayStream(c *gin.Context, resp *http.Response, req *request, m *measure) *failure {
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		d.metrics.rejects.Inc(rejects.DoorUpstream, reasonMalformedBody)
		return &failure{err: badGateway("upstream_malformed", fmt.Sprintf("the engine answered a streamed request with %q, not text/event-stream", textcut.Truncate(ct, 64))), retriable: true, code: "upstream_malformed"}
	}
	out := newRelayOut(c)
	defer out.release()
	sse := getSSEReader(&flushingReader{r: resp.Body, out: out}, d.cfg.maxLineBytes)
	defer putSSEReader(sse)
	// An engine may send its headers at once and its first event much
	// later: the first-byte bound holds until the first event too.
	var slow atomic.Bool
	first := time.AfterFunc(d.cfg.firstByte, func() { slow.Store(true); resp.Body.Close() })
	defer first.Stop()
	waiting := true
	for {
		data, err := sse.next()
		if waiting {
			first.Stop()
			waiting = false
		}
		if err != nil {
			var f *failure
			switch {
			case slow.Load():
				d.metrics.rejects.Inc(rejects.DoorUpstream, reasonFirstByte)
				f = &failure{err: &Error{Status: http.StatusGatewayTimeout, Type: typeServer, Code: "upstream_timeout",
					Message: fmt.Sprintf("the worker sent no event within %s (--door-upstream-first-byte-timeout)", d.cfg.firstByte)}, code: "upstream_timeout"}
			case errors.Is(err, errLineTooLong):
				d.metrics.rejects.Inc(rejects.DoorUpstream, reasonLineTooLong)
				f = &failure{err: badGateway("upstream_line_too_long", fmt.Sprintf("the engine sent an event-stream line over %d bytes (--door-max-upstream-line-bytes)", d.cfg.maxLineBytes)), code: "upstream_line_too_long"}
			case err == io.EOF:
				f = &failure{err: badGateway("upstream_truncated", "the engine's stream ended without [DONE]"), code: "upstream_truncated"}
			default:
				f = &failure{err: badGateway("upstream_error", "reading the engine's stream: "+textcut.Truncate(err.Error(), 200)), code: "upstream_error"}
			}
			return out.fail(f)
		}
		ch, perr := parseChunk(data)
		switch {
		case perr != nil:
			d.metrics.rejects.Inc(rejects.DoorUpstream, reasonMalformedChunk)
			return out.fail(&failure{err: badGateway("upstream_malformed_chunk", "the engine sent a malformed chunk: "+perr.Error()), code: "upstream_malformed_chunk"})
		case ch.err != nil:
			return out.fail(&failure{err: ch.err, code: "upstream_error"})
		case ch.done:
			out.open()
			out.add(doneData)
			out.flush()
			drain(resp.Body)
			return nil
		}
		if ch.completionTokens >= 0 {
			m.usage = ch.completionTokens
		}
		if ch.usageOnly && !req.includeUsage {
			continue
		}
		if ch.token {
			m.token()
		}
		if !out.opened && !ch.token && out.held < maxHeldChunks {
			out.add(data)
			out.held++
			continue
		}
		out.open()
		out.add(data)
	}
}

var doneData = []byte("[DONE]")

// An engine ends its answer right after [DONE]; the door reads it to its
// end (the chunked encoding's last chunk) so that the HTTP client keeps
// the connection for the next request: closed before its end, the answer
// costs the connection, and the next request a new TCP connection. What
// an engine sends after [DONE] is bounded, and so is how long the door
// waits for the end; past either the connection is dropped.
const (
	maxDrainBytes = 64 << 10
	maxDrainWait  = time.Second
)

// drain reads body to its end, bounded by maxDrainBytes and maxDrainWait.
func drain(body io.ReadCloser) {
	t := time.AfterFunc(maxDrainWait, func() { body.Close() })
	defer t.Stop()
	_, _ = io.CopyN(io.Discard, body, maxDrainBytes)
}

// relayOut is the client's side of a relayed stream. Events are appended
// to one buffer, which goes to the client in one write and one flush
// whenever the door is about to read the engine (flushingReader): the
// events of one upstream read reach the client together, and none waits
// behind a read that may block. Before the stream is opened (the first
// token, or more than maxHeldChunks events) the buffer only holds.
type relayOut struct {
	c      *gin.Context
	buf    *[]byte
	opened bool
	held   int
}

// relayBufs pools the relay buffers; one that grew past maxPooledRelayBuf
// (a long event) is left to the collector.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

const maxPooledRelayBuf = 64 << 10

func newRelayOut(c *gin.Context) *relayOut {
	b := relayBufs.Get().(*[]byte)
	*b = (*b)[:0]
	return &relayOut{c: c, buf: b}
}

func (o *relayOut) release() {
	if cap(*o.buf) <= maxPooledRelayBuf {
		relayBufs.Put(o.buf)
	}
	o.buf = nil
}

// add appends one event of the given data.
func (o *relayOut) add(data []byte) {
	b := append(*o.buf, "data: "...)
	b = append(b, data...)
	*o.buf = append(b, "\n\n"...)
}

// open sends the stream's headers, once.
func (o *relayOut) open() {
	if o.opened {
		return
	}
	h := o.c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	o.c.Status(http.StatusOK)
	o.opened = true
}

// flush writes what is buffered, if the stream is open. A failed write
// (the client went away) is seen by the request's context.
func (o *relayOut) flush() {
	if !o.opened || len(*o.buf) == 0 {
		return
	}
	_, _ = o.c.Writer.Write(*o.buf)
	o.c.Writer.Flush()
	*o.buf = (*o.buf)[:0]
}

// fail ends a stream that failed. Before anything reached the client it
// is retriable (what was held is dropped); after, the client gets the
// events read so far, then an error event in OpenAI's shape, and the
// stream ends.
func (o *relayOut) fail(f *failure) *failure {
	if !o.opened {
		f.retriable = true
		return f
	}
	o.add(f.err.body())
	o.flush()
	return f
}

// flushingReader flushes the relay's buffered events before each read of
// the engine's body.
type flushingReader struct {
	r   io.Reader
	out *relayOut
}

func (f *flushingReader) Read(p []byte) (int, error) {
	f.out.flush()
	return f.r.Read(p)
}
