package sim

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/pdrouter/pdrouter/kvhash"
)

// Segment is a run of Len token ids drawn deterministically from Seed. Prompts are
// sequences of segments, so two prompts that start with the same segments start with
// the same tokens, exactly, and nothing else is shared (up to the 1/vocab chance of a
// single equal token, which never makes a whole block equal).
type Segment struct {
	Seed uint64
	Len  int
}

// Request is one request of a workload.
type Request struct {
	// ID is unique within the workload; it becomes the router's request_id.
	ID string
	// Arrival is the time since the start of the workload.
	Arrival time.Duration
	// Prompt is the prompt, as segments; PromptLen is its length in tokens.
	Prompt    []Segment
	PromptLen int
	// OutputLen is how many tokens the request generates (at least 1).
	OutputLen int
	// Output is the seed of the generated tokens. A multi-turn workload puts the same
	// segment in the next turn's prompt, so the engine's cached output blocks are hits
	// for the next turn, as with a real chat client resending the history.
	Output uint64
	// Session names the conversation or agent run, "" for independent requests.
	Session string
}

// tokenVocab bounds generated token ids: Llama 3's vocabulary.
const tokenVocab = llama8BVocab

// SegmentToken is token j of a segment.
func SegmentToken(seed uint64, j int) uint32 {
	return uint32(mix64(seed*0x9e3779b97f4a7c15+uint64(j)+1) % tokenVocab)
}

// Tokens expands the prompt into token ids.
func (r *Request) Tokens() []uint32 {
	out := make([]uint32, 0, r.PromptLen)
	for _, s := range r.Prompt {
		for j := range s.Len {
			out = append(out, SegmentToken(s.Seed, j))
		}
	}
	return out
}

// OutputToken is the i-th generated token.
func (r *Request) OutputToken(i int) uint32 { return SegmentToken(r.Output, i) }

// Chain is the router hash chain of the prompt's complete blocks for a block size.
func (r *Request) Chain(blockSize int) []uint64 {
	return kvhash.Chain(nil, r.Tokens(), blockSize, 0, false)
}

// Workload is a finite, time-ordered list of requests.
type Workload struct {
	Name     string
	Requests []*Request
}

// Head returns the workload cut to its first n requests (n ≤ 0: all).
func (w *Workload) Head(n int) *Workload {
	if n <= 0 || n >= len(w.Requests) {
		return w
	}
	return &Workload{Name: w.Name, Requests: w.Requests[:n]}
}

// Until returns the workload cut to the requests arriving before d (d ≤ 0: all).
func (w *Workload) Until(d time.Duration) *Workload {
	if d <= 0 {
		return w
	}
	n := 0
	for n < len(w.Requests) && w.Requests[n].Arrival < d {
		n++
	}
	return &Workload{Name: w.Name, Requests: w.Requests[:n]}
}

// Scale returns the workload with its arrival rate multiplied by x (x > 0): every
// arrival time divided by x, the requests themselves unchanged. x = 1.5 replays a
// trace at one and a half times its load.
func (w *Workload) Scale(x float64) *Workload {
	if x == 1 || !(x > 0) {
		return w
	}
	out := &Workload{Name: w.Name, Requests: make([]*Request, len(w.Requests))}
	for i, r := range w.Requests {
		c := *r
		c.Arrival = time.Duration(float64(r.Arrival) / x)
		out.Requests[i] = &c
	}
	return out
}

// MaxArrivalSpread bounds Spread's window: a trace's ticks are seconds apart.
const MaxArrivalSpread = time.Minute

// Spread returns the workload with the requests that share an arrival time spread
// from it toward the next arrival time, over at most window (≤ 0: w as it is; the
// last group spreads over window). Mooncake's traces stamp requests in ticks (the
// conversation trace: ~10 requests every 3 s), which a router sees as bursts of
// simultaneous arrivals. The m requests of a tick get the m sorted points of a seeded
// uniform draw over the span, in their order: how a Poisson process with m arrivals in
// the span places them, so the rate and the order are the trace's, and close arrivals
// are as frequent as in a Poisson stream (an even spread would make none). The same
// seed gives the same arrivals.
func (w *Workload) Spread(window time.Duration, seed uint64) *Workload {
	if window <= 0 || len(w.Requests) == 0 {
		return w
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed5eed))
	out := &Workload{Name: w.Name, Requests: make([]*Request, len(w.Requests))}
	var at []time.Duration
	for i := 0; i < len(w.Requests); {
		t := w.Requests[i].Arrival
		j := i
		for j < len(w.Requests) && w.Requests[j].Arrival == t {
			j++
		}
		span := window
		if j < len(w.Requests) {
			span = min(w.Requests[j].Arrival-t, window)
		}
		at = at[:0]
		for range j - i {
			d := time.Duration(0)
			if span > 0 { // a workload out of time order leaves no room: kept as stamped
				d = time.Duration(rng.Int64N(int64(span)))
			}
			at = append(at, t+d)
		}
		slices.Sort(at)
		for k := i; k < j; k++ {
			c := *w.Requests[k]
			c.Arrival = at[k-i]
			out.Requests[k] = &c
		}
		i = j
	}
	return out
}

// Duration is the arrival time of the last request.
func (w *Workload) Duration() time.Duration {
	if len(w.Requests) == 0 {
		return 0
	}
	return w.Requests[len(w.Requests)-1].Arrival
}
