package replay

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/sim"
)

// TraceOptions configure ExportTrace.
type TraceOptions struct {
	// SegmentTokens is the tokens one hash_id stands for in the trace (512, the
	// block size of the Mooncake trace and of the simulator's reader).
	SegmentTokens int
	// MaxRequests bounds the requests of the window (the trace reader's bound):
	// a larger window is refused rather than held in memory.
	MaxRequests int
	// MaxContext drops a request whose prompt plus output exceeds it (the reader
	// refuses such a line); the drop is counted.
	MaxContext int
	// DefaultOutputTokens is the output_length of a request whose outcome reported
	// no output tokens (no terminal outcome in the window); 0 skips the request.
	DefaultOutputTokens int
	// JoinSlack is how far past the window's end outcomes are read (default 15 min).
	JoinSlack time.Duration
}

// TraceStats count what ExportTrace read and wrote.
type TraceStats struct {
	Decisions int64 `json:"decisions"`
	Written   int64 `json:"written"`
	// Duplicates are decisions of a request id already decided (replicas raced on
	// it); the earliest decision of a request is the one kept.
	Duplicates int64 `json:"duplicates"`
	// NoOutput are requests without reported output tokens: skipped, or given
	// DefaultOutputTokens (then also counted in Written).
	NoOutput int64 `json:"no_output"`
	// EmptyPrompt and TooLong are requests dropped: no prompt tokens, or more
	// tokens than MaxContext.
	EmptyPrompt int64 `json:"empty_prompt"`
	TooLong     int64 `json:"too_long"`
	// CutChains are requests whose recorded hash chain was cut to fit the record
	// (HashChain.omitted_blocks), or absent: their prompt shares nothing past it.
	CutChains int64 `json:"cut_chains"`
	// Outcomes is the number of outcome events read.
	Outcomes int64 `json:"outcomes"`
}

// traceRequest is what ExportTrace keeps of a decision until the window is sorted.
type traceRequest struct {
	decidedAt  int64
	decisionID string
	prompt     int
	segments   []uint64 // the router hash that ends each trace segment
	cut        bool     // the chain was absent or cut to fit the record
}

// ExportTrace writes the window's requests as a Mooncake JSONL trace, one line per
// request id in decision order (decided_at, then decision id):
//
//   - timestamp: milliseconds (integer, rounded down) from the window's first
//     decision to the request's decision, by the decisions' event time;
//   - input_length: the decision's prompt_tokens;
//   - output_length: the output tokens of the request's terminal outcome (the
//     earliest completed or cancelled event, as `export --join-outcomes`);
//     without one, DefaultOutputTokens or the request is skipped (counted);
//   - hash_ids: the prompt as SegmentTokens-token segments, each named by the
//     router hash of the last complete block of the recorded chain that ends
//     inside it (a chained hash names the whole prefix through it), mapped to
//     dense integers in first-seen order. With a block size B that divides
//     SegmentTokens (vLLM's 16 does 512) a full segment's id is exact: two
//     requests share id k iff they share the prompt through segment k. A partial
//     last segment is named by its last complete block, so two requests whose ids
//     agree there may be given up to B−1 more shared tokens than they had. The
//     ids stop at the first segment without a complete block in the chain (a
//     tail shorter than a block, or a chain cut to fit the record): the reader
//     makes the rest a prompt tail of the request's own. The chain at the decode
//     worker's block size is used when the record has it, else the smallest.
//
// The same window gives the same bytes: nothing depends on read order, map order
// or the wall clock.
func ExportTrace(ctx context.Context, src *KafkaLog, w io.Writer, o TraceOptions) (TraceStats, error) {
	var st TraceStats
	if o.SegmentTokens <= 0 || o.MaxRequests <= 0 || o.MaxContext <= 0 || o.DefaultOutputTokens < 0 {
		return st, fmt.Errorf("replay: trace options %+v: segment tokens, max requests and max context must be > 0", o)
	}
	outputs, err := traceOutputs(ctx, src, o.JoinSlack, &st)
	if err != nil {
		return st, err
	}
	byRequest := map[string]int{}
	var reqs []traceRequest
	err = src.EachDecision(ctx, func(rec *pb.DecisionRecord, _ Position) error {
		st.Decisions++
		tr := traceRequest{decidedAt: rec.GetDecidedAtUnixNano(), decisionID: rec.GetDecisionId(), prompt: int(rec.GetPromptTokens())}
		if i, ok := byRequest[rec.GetRequestId()]; ok {
			st.Duplicates++
			if cmp.Or(cmp.Compare(tr.decidedAt, reqs[i].decidedAt), cmp.Compare(tr.decisionID, reqs[i].decisionID)) < 0 {
				tr.segments, tr.cut = traceSegments(rec, o.SegmentTokens, o.MaxContext)
				reqs[i] = tr
			}
			return nil
		}
		if len(reqs) == o.MaxRequests {
			return fmt.Errorf("replay: the window has more than %d requests (the trace bound); narrow --from/--to", o.MaxRequests)
		}
		tr.segments, tr.cut = traceSegments(rec, o.SegmentTokens, o.MaxContext)
		byRequest[rec.GetRequestId()] = len(reqs)
		reqs = append(reqs, tr)
		return nil
	})
	if err != nil {
		return st, err
	}
	// Order requests by decision, and give each request its output.
	order := make([]string, 0, len(byRequest))
	for id := range byRequest {
		order = append(order, id)
	}
	slices.SortFunc(order, func(a, b string) int {
		x, y := reqs[byRequest[a]], reqs[byRequest[b]]
		return cmp.Or(cmp.Compare(x.decidedAt, y.decidedAt), cmp.Compare(x.decisionID, y.decisionID), cmp.Compare(a, b))
	})
	bw := bufio.NewWriter(w)
	trace := sim.NewMooncakeWriter()
	var first int64
	var line []byte
	for n, id := range order {
		r := reqs[byRequest[id]]
		if n == 0 {
			first = r.decidedAt
		}
		out, ok := outputs[id]
		if !ok {
			st.NoOutput++
			if o.DefaultOutputTokens == 0 {
				continue
			}
			out = o.DefaultOutputTokens
		}
		if r.prompt < 1 {
			st.EmptyPrompt++
			continue
		}
		if r.prompt > o.MaxContext || out > o.MaxContext-r.prompt {
			st.TooLong++
			continue
		}
		if r.cut {
			st.CutChains++
		}
		line = trace.AppendLine(line[:0], (r.decidedAt-first)/int64(time.Millisecond), r.prompt, out, r.segments)
		if _, err := bw.Write(line); err != nil {
			return st, err
		}
		st.Written++
	}
	return st, bw.Flush()
}

// traceOutputs reads the outcomes of the window (and JoinSlack past it) and returns
// each request's output tokens, from its terminal outcome by the join's rules.
func traceOutputs(ctx context.Context, src *KafkaLog, slack time.Duration, st *TraceStats) (map[string]int, error) {
	ol := *src
	if !ol.Window.To.IsZero() {
		if slack <= 0 {
			slack = 15 * time.Minute
		}
		ol.Window.To = ol.Window.To.Add(slack)
	}
	sums := map[string]*outcomeSummary{}
	err := ol.EachOutcome(ctx, func(ev *pb.OutcomeEvent, _ Position) error {
		st.Outcomes++
		s := sums[ev.GetRequestId()]
		if s == nil {
			s = &outcomeSummary{}
			sums[ev.GetRequestId()] = s
		}
		s.add(ev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(sums))
	for id, s := range sums {
		if s.terminal != nil && s.terminal.OutputTokens != nil {
			out[id] = int(s.terminal.GetOutputTokens())
		}
	}
	return out, nil
}

// traceSegments names each segment of segTokens tokens of the prompt by the hash of
// the last complete block of the record's chain that ends inside it (see
// ExportTrace), stopping at the first segment that has none. cut is whether the
// record's chain was absent or cut to fit the record. A prompt longer than
// maxContext is not split (ExportTrace drops it), so memory stays bounded by
// maxContext ÷ segTokens ids per request.
func traceSegments(rec *pb.DecisionRecord, segTokens, maxContext int) (segs []uint64, cut bool) {
	chain := traceChain(rec)
	if chain == nil || chain.GetBlockSize() == 0 {
		return nil, true
	}
	b, hashes, p := int(chain.GetBlockSize()), chain.GetBlockHashes(), int(rec.GetPromptTokens())
	if p > maxContext {
		return nil, false
	}
	for start := 0; start < p; start += segTokens {
		end := min(start+segTokens, p)
		idx := end/b - 1 // the last complete block ending at or before end
		if idx < 0 || idx >= len(hashes) || (idx+1)*b <= start {
			break
		}
		segs = append(segs, hashes[idx])
	}
	return segs, chain.GetOmittedBlocks() > 0
}

// traceChain is the record's chain at the decode worker's block size, else the one
// with the smallest block size (the finest prefix sharing).
func traceChain(rec *pb.DecisionRecord) *pb.HashChain {
	var best *pb.HashChain
	for _, c := range rec.GetChains() {
		if c.GetBlockSize() == rec.GetBlockSize() {
			return c
		}
		if c.GetBlockSize() > 0 && (best == nil || c.GetBlockSize() < best.GetBlockSize()) {
			best = c
		}
	}
	return best
}
