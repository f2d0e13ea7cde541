package sim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// MooncakeBlockTokens is the block size of the Mooncake trace's hash_ids: each id names
// 512 tokens (Mooncake FAST'25 trace release, README).
const MooncakeBlockTokens = 512

// Bounds of a Mooncake trace, so that a hostile or corrupt file is refused with the
// line at fault rather than exhausting memory or overflowing simulated time.
const (
	// MaxMooncakeLineBytes is the longest line read: 256 ids of a full context are
	// about 5 KB, so 1 MiB leaves room for any real line.
	MaxMooncakeLineBytes = 1 << 20
	// MaxMooncakeRequests is the most requests a trace may hold (the published
	// conversation trace has 12,031).
	MaxMooncakeRequests = 1_000_000
	// MaxMooncakeTimestampMs is the latest arrival: 30 days, far inside a
	// time.Duration and longer than any trace a simulator replays.
	MaxMooncakeTimestampMs = 30 * 24 * 3600 * 1000
	// MaxMooncakeContext is the default model's context (max_position_embeddings). A
	// request past it is read, and the simulated fleet refuses it as an engine would
	// (a 400): the published synthetic trace holds ten, of up to 191,386 tokens.
	MaxMooncakeContext = llama8BMaxModelLen
	// MaxMooncakeRequestTokens bounds input_length and output_length each, so that
	// no line can declare a request whose tokens would exhaust memory when it is
	// served: 8 times the default context.
	MaxMooncakeRequestTokens = 8 * MaxMooncakeContext
)

// mooncakeLine is one line of a Mooncake JSONL trace.
type mooncakeLine struct {
	Timestamp    *float64 `json:"timestamp"` // milliseconds from the start
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// mooncakeSeedTag keeps hash-id seeds apart from the seeds of other workloads.
const mooncakeSeedTag = 0x6d6f6f6e63616b65 // "mooncake"

// MooncakeSegmentSeed is the seed of the 512 tokens a trace hash_id stands for.
func MooncakeSegmentSeed(hashID uint64) uint64 { return mix64(hashID ^ mooncakeSeedTag) }

// LoadMooncake reads a Mooncake trace file (see ReadMooncake).
func LoadMooncake(path string) (*Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	w, err := ReadMooncake(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	w.Name = path
	return w, nil
}

// ReadMooncake reads a Mooncake JSONL trace. Hash id k becomes a segment of 512 tokens
// drawn from MooncakeSegmentSeed(k), so requests that share a leading run of ids share
// exactly that token prefix, and the router's hash chains agree up to it. input_length
// need not be a multiple of 512: the last id covers only the tail it is given (a
// prefix of that id's 512 tokens, so a shared last id still shares its common part). If
// input_length exceeds the ids' 512·n tokens, the rest is a segment unique to the
// request. Requests are sorted by timestamp (stable, so equal timestamps keep their
// order, which in the trace is the order of turns within a conversation). A trace past
// the MaxMooncake… bounds, or a line without a prompt, is refused with its line number.
func ReadMooncake(r io.Reader) (*Workload, error) { return readMooncake(r, MaxMooncakeRequests) }

func readMooncake(r io.Reader, maxRequests int) (*Workload, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxMooncakeLineBytes)
	w := &Workload{}
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		if len(w.Requests) == maxRequests {
			return nil, fmt.Errorf("line %d: more than %d requests", line, maxRequests)
		}
		var l mooncakeLine
		if err := json.Unmarshal(b, &l); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if l.Timestamp == nil || l.InputLength == nil || l.OutputLength == nil {
			return nil, fmt.Errorf("line %d: want timestamp, input_length and output_length", line)
		}
		if *l.InputLength < 0 || *l.OutputLength < 0 || *l.Timestamp < 0 {
			return nil, fmt.Errorf("line %d: negative timestamp or length", line)
		}
		if *l.Timestamp > MaxMooncakeTimestampMs {
			return nil, fmt.Errorf("line %d: timestamp %g ms is past %d ms (30 days)", line, *l.Timestamp, MaxMooncakeTimestampMs)
		}
		if *l.InputLength < 1 {
			return nil, fmt.Errorf("line %d: input_length 0: a request needs a prompt", line)
		}
		if *l.InputLength > MaxMooncakeRequestTokens || *l.OutputLength > MaxMooncakeRequestTokens {
			return nil, fmt.Errorf("line %d: input_length %d or output_length %d is past %d tokens",
				line, *l.InputLength, *l.OutputLength, MaxMooncakeRequestTokens)
		}
		idx := len(w.Requests)
		req := &Request{
			ID:        fmt.Sprintf("mc-%05d", idx),
			Arrival:   time.Duration(*l.Timestamp * float64(time.Millisecond)),
			PromptLen: *l.InputLength,
			OutputLen: max(*l.OutputLength, 1),
			Output:    mix64(uint64(idx) ^ 0x6f7574707574), // unique per request
		}
		left := *l.InputLength
		for _, id := range l.HashIDs {
			if left == 0 {
				break
			}
			n := min(left, MooncakeBlockTokens)
			req.Prompt = append(req.Prompt, Segment{Seed: MooncakeSegmentSeed(id), Len: n})
			left -= n
		}
		if left > 0 {
			req.Prompt = append(req.Prompt, Segment{Seed: mix64(uint64(idx) ^ 0x7461696c), Len: left})
		}
		w.Requests = append(w.Requests, req)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d bytes", line+1, MaxMooncakeLineBytes)
		}
		return nil, err
	}
	sortByArrival(w.Requests)
	return w, nil
}
