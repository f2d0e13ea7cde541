package sim

import "time"

// Timing turns a step's shape into its duration. It is a roofline model: a step costs
// the larger of its compute time and its memory time, plus a fixed overhead.
//
//	compute = (2·Params·(prefill tokens + decode tokens) + 4·Layers·Hidden·pairs) / (PeakFLOPS·MFU)
//	memory  = (weights + KV bytes read by the batch) / (HBM·efficiency)
//	step    = overhead + max(compute, memory)
//
// pairs counts the causal (query, key) pairs of the prefill chunks: a chunk of n new
// tokens after c already-computed tokens attends to n·c + n(n+1)/2 keys, so a prefill's
// time has a linear term in the uncached tokens (the matrix multiplies) and a quadratic
// one (attention). Decode steps are memory-bound: every step reads the weights and the
// KV of every running request, so ITL grows with the active KV. A prefill chunk in the
// same step adds compute; once it outweighs the memory time, the step (and so the ITL of
// every decode in it) grows with the chunk. Small chunks ride along almost free, the
// effect chunked prefill relies on (Sarathi-Serve, OSDI'24).
type Timing struct {
	hw Hardware
	// secPerFLOP and secPerByte are the sustained rates.
	secPerFLOP, secPerByte float64
}

// NewTiming derives the rates from the hardware figures.
func NewTiming(hw Hardware) Timing {
	return Timing{hw: hw, secPerFLOP: 1 / (hw.PeakFLOPS * hw.PrefillMFU), secPerByte: 1 / (hw.HBMBytesPerSec * hw.HBMEfficiency)}
}

// Hardware returns the figures the model was built from.
func (t Timing) Hardware() Hardware { return t.hw }

// Chunk is the prefill work of one request in one step: New tokens computed after
// Context tokens whose KV already exists (cached prefix or earlier chunks).
type Chunk struct{ New, Context int }

// StepShape is what one engine step runs.
type StepShape struct {
	// Chunks are the prefill chunks scheduled in the step.
	Chunks []Chunk
	// Decodes is the number of requests generating one token in the step, and
	// DecodeContext the sum of their context lengths (the KV they read).
	Decodes       int
	DecodeContext int
}

func (t Timing) seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// computeSec is the FLOP time of a step.
func (t Timing) computeSec(s StepShape) float64 {
	var tokens, pairs float64
	for _, c := range s.Chunks {
		n, ctx := float64(c.New), float64(c.Context)
		tokens += n
		pairs += n*ctx + n*(n+1)/2
	}
	tokens += float64(s.Decodes)
	pairs += float64(s.DecodeContext) + float64(s.Decodes) // each decode token attends to its context and itself
	flops := 2*t.hw.Params*tokens + 4*float64(t.hw.Layers)*float64(t.hw.Hidden)*pairs
	return flops * t.secPerFLOP
}

// memorySec is the HBM time of a step: the weights once, and the KV that attention
// reads (each decode's context, each chunk's context).
func (t Timing) memorySec(s StepShape) float64 {
	kv := float64(s.DecodeContext)
	for _, c := range s.Chunks {
		kv += float64(c.Context + c.New)
	}
	return (t.hw.WeightBytes + kv*t.hw.KVBytesPerToken) * t.secPerByte
}

// Step is the duration of one step.
func (t Timing) Step(s StepShape) time.Duration {
	if len(s.Chunks) == 0 && s.Decodes == 0 {
		return 0
	}
	return t.hw.StepOverhead + t.seconds(max(t.computeSec(s), t.memorySec(s)))
}

// Prefill is the time of a prefill of uncached tokens after cached ones on an otherwise
// idle engine, in chunks of at most budget tokens (≤ 0: one chunk). It is the sum of the
// steps the engine would run, so it includes the per-step overhead and weight reads.
func (t Timing) Prefill(uncached, cached, budget int) time.Duration {
	if budget <= 0 {
		budget = max(uncached, 1)
	}
	var d time.Duration
	for done := 0; done < uncached; {
		n := min(budget, uncached-done)
		d += t.Step(StepShape{Chunks: []Chunk{{New: n, Context: cached + done}}})
		done += n
	}
	return d
}

// Transfer is the time to move the KV of tokens into a decode worker: bytes per token
// ÷ bandwidth, plus the fixed latency.
func (t Timing) Transfer(tokens int) time.Duration {
	if tokens <= 0 {
		return t.hw.TransferLatency
	}
	return t.hw.TransferLatency + t.seconds(float64(tokens)*t.hw.KVBytesPerToken/t.hw.TransferBytesPerSec)
}

// HostLoad is the time to load the KV of tokens from the engine's host tier into its
// GPU: bytes per token ÷ the host link's bandwidth.
func (t Timing) HostLoad(tokens int) time.Duration {
	if tokens <= 0 || t.hw.HostBytesPerSec <= 0 {
		return 0
	}
	return t.seconds(float64(tokens) * t.hw.KVBytesPerToken / t.hw.HostBytesPerSec)
}
