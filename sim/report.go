package sim

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Latency is a latency distribution summary.
type Latency struct {
	P50, P90, P99, Mean time.Duration
	N                   int
}

// errOverContext: a request longer than the engines' context.
var errOverContext = errors.New("over the model's context")

// Report is what a run shows a user. It is computed from simulated time only, so an
// offline run's report is a pure function of its inputs.
type Report struct {
	Label string
	// Requests is the workload size; Completed finished, Failed could not be routed
	// or served (a live router's errors), Unfinished were cut off (context ended).
	Requests, Completed, Failed, Unfinished int
	// OverContext counts the Failed requests whose prompt and output exceed the
	// engines' context, which an engine refuses.
	OverContext int
	// Span is the simulated time from the first arrival to the last completion.
	Span time.Duration
	// TTFT over completed requests; ITL over completed requests with ≥ 2 output
	// tokens, each request counted once with its mean inter-token latency.
	TTFT, ITL Latency
	SLO       SLO
	// PolicySLO is the SLO the run's policy decided with, when it reads one
	// (cond-slo); zero otherwise.
	PolicySLO SLO
	// Replicas are the router replicas of an offline run and Races the decisions
	// each made on a decode worker before a peer's decision there reached it
	// (LocalRouter.Races); zero for a live run.
	Replicas Replicas
	Races    int64
	// Good requests completed within both SLOs (a one-token request has no ITL to
	// miss). Goodput is Good ÷ Requests; GoodputRate is Good per simulated second.
	Good        int
	Goodput     float64
	GoodputRate float64
	// Local and Remote count routed requests by mode; Reasons counts reason codes.
	Local, Remote int
	Reasons       map[string]int
	// Unplaced counts requests served whose placement the driver could not see
	// (RunViaOpenAI: a router's door answers with the completion, not the decision).
	Unplaced int
	// DecisionIDs counts answers that named the router's decision (the
	// route's decision_id, or a door's x-pdrouter-decision-id header);
	// Decisions are those ids, in the workload's order, so that a caller
	// can check each decision's outcome on the log.
	DecisionIDs int
	Decisions   []string
	// PromptTokens routed; CacheHitTokens of them were found in the prefix cache of
	// the worker that prefilled (so not recomputed). HitRatio is their ratio.
	PromptTokens, CacheHitTokens int64
	HitRatio                     float64
	// HostHitTokens were loaded from the host (CPU) tier of the worker that
	// prefilled, after its GPU hits (0 without host tiers).
	HostHitTokens int64
	// TransferTokens is the KV moved from prefill to decode workers.
	TransferTokens int64
	// PrefillComputed is the prompt tokens computed, by pool ("prefill" workers or
	// "decode" workers prefilling locally): the prefill load each pool carried.
	PrefillComputedOnPrefill, PrefillComputedOnDecode int64
	// Sampled every simulated second while work remained: requests waiting on the
	// prefill workers (mean per worker, max), prompt tokens queued there, and KV usage
	// of the decode workers (mean, max).
	PrefillQueueMean float64
	PrefillQueueMax  int
	PrefillTokensMax int
	DecodeKVMean     float64
	DecodeKVMax      float64
	// TTFTSamples and ITLSamples are the sorted per-request values behind TTFT
	// and ITL, for the CDF charts of `sim compare --out`.
	TTFTSamples, ITLSamples []time.Duration
	// Fates are the completed requests' latencies, in the workload's order, so that
	// goodput can be scored again under another SLO without running again (GoodUnder).
	Fates []Fate
}

// Fate is what one completed request saw: its TTFT and, when it generated at least
// two tokens (HasITL), its mean inter-token latency.
type Fate struct {
	TTFT, ITL time.Duration
	HasITL    bool
}

func (f *Fleet) report(label string) *Report {
	rep := summarizeResults(label, f.cfg.SLO, f.results)
	f.engineFigures(rep)
	return rep
}

// viaAPIReport completes the report of a workload a client sent through
// the engines' HTTP API (RunViaOpenAI), which sees latencies but not what
// the engines did: the prompt tokens, prefix cache hits and KV transfers
// are the engines' own counts of the requests their API served, and the
// prefill load and queues are the engines', as in a routed run's report.
// Call it on the loop's goroutine, or once the loop has stopped.
func (f *Fleet) viaAPIReport(rep *Report) {
	x := f.external
	rep.PromptTokens, rep.CacheHitTokens, rep.HostHitTokens, rep.TransferTokens = x.promptTokens, x.hitTokens, x.hostHitTokens, x.transferTokens
	rep.HitRatio = 0
	if x.promptTokens > 0 {
		rep.HitRatio = float64(x.hitTokens) / float64(x.promptTokens)
	}
	f.engineFigures(rep)
}

// engineFigures fills the part of a report that only the engines know: the
// prompt tokens each pool computed, and the queue and KV usage samples.
func (f *Fleet) engineFigures(rep *Report) {
	nPrefill, nDecode := 0, 0
	for _, e := range f.engines {
		if e.cfg.Pool == PoolPrefill {
			nPrefill++
			rep.PrefillComputedOnPrefill += int64(e.prefilled)
		} else {
			nDecode++
			rep.PrefillComputedOnDecode += int64(e.prefilled)
		}
	}
	if s := f.samples; s.n > 0 {
		if nPrefill > 0 {
			rep.PrefillQueueMean = s.prefillWaitSum / float64(s.n*nPrefill)
		}
		rep.PrefillQueueMax, rep.PrefillTokensMax = s.prefillWaitMax, s.prefillTokMax
		rep.DecodeKVMean, rep.DecodeKVMax = s.decodeUsageSum/float64(s.n*nDecode), s.decMax
	}
}

// summarizeResults is the part of a report that the requests' fates alone give:
// counts, latencies, goodput, placement and cache hits.
func summarizeResults(label string, slo SLO, results []*result) *Report {
	rep := &Report{Label: label, Requests: len(results), SLO: slo, Reasons: map[string]int{}}
	var ttft, itl []time.Duration
	var first, last simTime = -1, 0
	for _, r := range results {
		if first < 0 || r.arrival < first {
			first = r.arrival
		}
		switch {
		case r.err != nil:
			rep.Failed++
			if errors.Is(r.err, errOverContext) {
				rep.OverContext++
			}
			continue
		case !r.routed:
			rep.Unfinished++
			continue
		}
		switch r.dec.Mode {
		case ModeLocal:
			rep.Local++
			rep.Reasons[r.dec.Reason]++
		case ModeRemote:
			rep.Remote++
			rep.Reasons[r.dec.Reason]++
		default:
			rep.Unplaced++
		}
		if r.decisionID != "" {
			rep.DecisionIDs++
			rep.Decisions = append(rep.Decisions, r.decisionID)
		}
		rep.PromptTokens += int64(r.req.PromptLen)
		rep.CacheHitTokens += int64(r.promptHit)
		rep.HostHitTokens += int64(r.hostHit)
		rep.TransferTokens += int64(r.transfer)
		if !r.finished {
			rep.Unfinished++
			continue
		}
		rep.Completed++
		last = max(last, r.done)
		fate := Fate{TTFT: r.firstToken - r.arrival}
		ttft = append(ttft, fate.TTFT)
		if r.generated >= 2 {
			fate.ITL, fate.HasITL = r.itl(), true
			itl = append(itl, fate.ITL)
		}
		rep.Fates = append(rep.Fates, fate)
		if fate.meets(slo) {
			rep.Good++
		}
	}
	rep.TTFT, rep.ITL = summarize(ttft), summarize(itl)
	slices.Sort(ttft)
	slices.Sort(itl)
	rep.TTFTSamples, rep.ITLSamples = ttft, itl
	if first >= 0 && last > first {
		rep.Span = last - first
		rep.GoodputRate = float64(rep.Good) / rep.Span.Seconds()
	}
	if rep.Requests > 0 {
		rep.Goodput = float64(rep.Good) / float64(rep.Requests)
	}
	if rep.PromptTokens > 0 {
		rep.HitRatio = float64(rep.CacheHitTokens) / float64(rep.PromptTokens)
	}
	return rep
}

func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Latency{P50: pick(s, 0.5), P90: pick(s, 0.9), P99: pick(s, 0.99), Mean: sum / time.Duration(len(s)), N: len(s)}
}

// pick is the nearest-rank percentile of sorted values.
func pick(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return pick(s, p)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// LocalShare is the fraction of routed requests prefilled locally.
func (r *Report) LocalShare() float64 {
	if n := r.Local + r.Remote; n > 0 {
		return float64(r.Local) / float64(n)
	}
	return 0
}

// Format prints the report for a person.
func (r *Report) Format(w io.Writer) {
	fmt.Fprintf(w, "== %s ==\n", r.Label)
	fmt.Fprintf(w, "requests     %d routed of %d; %d completed, %d failed, %d unfinished; span %s (simulated)\n",
		r.Local+r.Remote+r.Unplaced, r.Requests, r.Completed, r.Failed, r.Unfinished, r.Span.Round(time.Millisecond))
	if r.OverContext > 0 {
		fmt.Fprintf(w, "             of the failed, %d over the model's context (an engine answers them 400)\n", r.OverContext)
	}
	fmt.Fprintf(w, "TTFT         p50 %s  p90 %s  p99 %s  mean %s\n", ms(r.TTFT.P50), ms(r.TTFT.P90), ms(r.TTFT.P99), ms(r.TTFT.Mean))
	fmt.Fprintf(w, "ITL (mean/request) p50 %s  p90 %s  p99 %s  (%d requests with ≥ 2 tokens)\n", ms(r.ITL.P50), ms(r.ITL.P90), ms(r.ITL.P99), r.ITL.N)
	fmt.Fprintf(w, "goodput      %d of %d requests (%.1f%%) within TTFT ≤ %s and ITL ≤ %s; %.2f good req/s\n",
		r.Good, r.Requests, 100*r.Goodput, r.SLO.TTFT, r.SLO.ITL, r.GoodputRate)
	if r.PolicySLO != (SLO{}) {
		fmt.Fprintf(w, "policy SLO   the policy decided with TTFT ≤ %s and ITL ≤ %s\n", r.PolicySLO.TTFT, r.PolicySLO.ITL)
	}
	if r.Replicas.N > 1 {
		fmt.Fprintf(w, "replicas     %d, each seeing the others' decisions and outcomes %s late%s; %d decisions raced a peer's on their decode worker\n",
			r.Replicas.N, r.Replicas.Lag, r.Replicas.cutNote(), r.Races)
	}
	fmt.Fprintf(w, "placement    local %d (%.1f%%), remote %d\n", r.Local, 100*r.LocalShare(), r.Remote)
	if r.Unplaced > 0 {
		fmt.Fprintf(w, "  %-38s %d (%d answers named a decision id)\n", "not visible to the client", r.Unplaced, r.DecisionIDs)
	}
	for _, k := range sortedKeys(r.Reasons) {
		fmt.Fprintf(w, "  %-38s %d\n", k, r.Reasons[k])
	}
	fmt.Fprintf(w, "prefix cache %.1f%% of %d prompt tokens hit where prefilled; %d tokens of KV transferred\n",
		100*r.HitRatio, r.PromptTokens, r.TransferTokens)
	if r.HostHitTokens > 0 {
		fmt.Fprintf(w, "host tier    %d prompt tokens (%.1f%%) loaded from the prefilling worker's CPU tier\n",
			r.HostHitTokens, 100*float64(r.HostHitTokens)/float64(max(r.PromptTokens, 1)))
	}
	fmt.Fprintf(w, "prefill load %d tokens computed on prefill workers, %d on decode workers\n", r.PrefillComputedOnPrefill, r.PrefillComputedOnDecode)
	fmt.Fprintf(w, "queues       prefill waiting mean %.2f/worker (max %d, max %d tokens queued); decode KV usage mean %.1f%% max %.1f%%\n",
		r.PrefillQueueMean, r.PrefillQueueMax, r.PrefillTokensMax, 100*r.DecodeKVMean, 100*r.DecodeKVMax)
}

// FormatTable prints several reports as one comparison table. A "host hit%" column
// (prompt tokens loaded from host tiers) follows hit% when any run had host tiers, and
// a "races" column ends the row when any run had several router replicas.
func FormatTable(w io.Writer, reps []*Report) {
	host, replicas := false, false
	for _, r := range reps {
		host = host || r.HostHitTokens > 0
		replicas = replicas || r.Replicas.N > 1
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hostCol := optionalColumn(host, "host hit%", func(r *Report) string {
		return fmt.Sprintf("%.1f", 100*float64(r.HostHitTokens)/float64(max(r.PromptTokens, 1)))
	})
	racesCol := optionalColumn(replicas, "races", func(r *Report) string { return fmt.Sprint(r.Races) })
	fmt.Fprintln(tw, "policy\tdone\tlocal%\tTTFT p50\tTTFT p99\tITL p50\tITL p99\tgoodput%\thit%\t"+hostCol(nil)+"prefill tok on P\ton D\tKV moved\t"+racesCol(nil))
	for _, r := range reps {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%s%d\t%d\t%d\t%s\n", r.Label, r.Completed, 100*r.LocalShare(),
			ms(r.TTFT.P50), ms(r.TTFT.P99), ms(r.ITL.P50), ms(r.ITL.P99), 100*r.Goodput, 100*r.HitRatio, hostCol(r),
			r.PrefillComputedOnPrefill, r.PrefillComputedOnDecode, r.TransferTokens, racesCol(r))
	}
	_ = tw.Flush()
}

// optionalColumn is a column of FormatTable shown only when on: its header for a nil
// report, else its cell, each with its tab.
func optionalColumn(on bool, header string, cell func(*Report) string) func(*Report) string {
	return func(r *Report) string {
		switch {
		case !on:
			return ""
		case r == nil:
			return header + "\t"
		}
		return cell(r) + "\t"
	}
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// String is Format into a string.
func (r *Report) String() string {
	var b strings.Builder
	r.Format(&b)
	return b.String()
}
