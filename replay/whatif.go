package replay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// WhatIfOptions describe the alternative policy.
type WhatIfOptions struct {
	// Disagg is a --router-conditional-disagg-config value; keys left out
	// take their defaults, as on the router. Empty keeps each record's own.
	Disagg []byte
	// Enable, when set, overrides --router-conditional-disagg.
	Enable *bool
	// Examples is how many flipped decisions to list; default 10.
	Examples int
	Logger   *slog.Logger
}

// WhatIfReport is what a policy change would have done to a window of
// decisions. Every figure comes from recomputing each decision from its own
// record under the alternative config (only the mode can change: the worker
// choice does not depend on the policy). Load figures are first order: they
// move each flipped request's prefill, and do not model how the other
// requests would have been decided on the state that move would have made.
type WhatIfReport struct {
	Config    string `json:"config"`
	Decisions int    `json:"decisions"`
	// Skipped decisions could not be recomputed (see SkipReasons).
	Skipped     int            `json:"skipped"`
	SkipReasons map[string]int `json:"skip_reasons,omitempty"`
	// BaselineMismatches counts records whose recompute under their own
	// config does not give their recorded mode (the pure check failing);
	// they are compared against the recorded mode all the same.
	BaselineMismatches int `json:"baseline_mismatches"`
	// ConfigHashes are the configs the window's records were decided under.
	ConfigHashes []string `json:"config_hashes"`

	LocalBefore      int     `json:"local_before"`
	LocalAfter       int     `json:"local_after"`
	LocalShareBefore float64 `json:"local_share_before"`
	LocalShareAfter  float64 `json:"local_share_after"`

	Flips         int          `json:"flips"`
	LocalToRemote int          `json:"local_to_remote"`
	RemoteToLocal int          `json:"remote_to_local"`
	ByReason      []ReasonFlip `json:"by_reason"`
	// FlippedEffISL is the effective-ISL distribution of the flipped requests.
	FlippedEffISL Distribution `json:"flipped_effective_isl"`
	LoadShift     LoadShift    `json:"load_shift"`
	Examples      []Flip       `json:"examples"`
}

// ReasonFlip counts flips from one reason code to another.
type ReasonFlip struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Count int    `json:"count"`
}

// Flip is one decision whose mode changes.
type Flip struct {
	DecisionID   string  `json:"decision_id"`
	RequestID    string  `json:"request_id"`
	From         string  `json:"from"`
	To           string  `json:"to"`
	FromReason   string  `json:"from_reason"`
	ToReason     string  `json:"to_reason"`
	EffectiveISL int64   `json:"effective_isl"`
	DecidedBy    string  `json:"decided_by"`
	Distance     float64 `json:"distance"`
}

// LoadShift is where prefill work goes, before and after, in prompt tokens
// to prefill. A local prefill costs its decode worker the effective ISL; a
// remote one costs its prefill worker the prompt minus what that worker
// holds on device, as the router's active accounting counts it.
type LoadShift struct {
	DecodePoolPrefillTokensBefore  int64 `json:"decode_pool_prefill_tokens_before"`
	DecodePoolPrefillTokensAfter   int64 `json:"decode_pool_prefill_tokens_after"`
	PrefillPoolPrefillTokensBefore int64 `json:"prefill_pool_prefill_tokens_before"`
	PrefillPoolPrefillTokensAfter  int64 `json:"prefill_pool_prefill_tokens_after"`
	// MovedToDecode: prefill tokens of remote→local flips (now on decode
	// workers); MovedToPrefill: of local→remote flips.
	MovedToDecode  int64 `json:"moved_to_decode"`
	MovedToPrefill int64 `json:"moved_to_prefill"`
	// Workers lists the per-worker change, largest first (at most 20).
	Workers []WorkerShift `json:"workers"`
}

// WorkerShift is one worker's change of prefill tokens.
type WorkerShift struct {
	Worker string `json:"worker"`
	Pool   string `json:"pool"`
	Delta  int64  `json:"delta_prefill_tokens"`
}

// WhatIf recomputes every decision of src under the alternative config.
func WhatIf(ctx context.Context, src DecisionSource, o WhatIfOptions) (*WhatIfReport, error) {
	if o.Examples <= 0 {
		o.Examples = 10
	}
	rep := &WhatIfReport{Config: string(o.Disagg), SkipReasons: map[string]int{}, Examples: []Flip{}, ByReason: []ReasonFlip{}}
	w := newWhatIf(o)
	err := src.EachDecision(ctx, func(rec *pb.DecisionRecord, _ Position) error {
		w.add(rep, rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	w.finish(rep)
	return rep, nil
}

// whatIf holds the state of one what-if pass: deciders per base config
// (records of one window usually share one or two configs, and building a
// decider validates and hashes its config).
type whatIf struct {
	o        WhatIfOptions
	base     map[string]*decider.Decider
	alt      map[string]*decider.Decider
	bad      map[string]string
	dst      decider.Decision
	flipISL  []float64
	reasons  map[[2]string]int
	workers  map[string]*WorkerShift
	hashes   map[string]bool
	examples []Flip
}

func newWhatIf(o WhatIfOptions) *whatIf {
	return &whatIf{o: o, base: map[string]*decider.Decider{}, alt: map[string]*decider.Decider{}, bad: map[string]string{},
		reasons: map[[2]string]int{}, workers: map[string]*WorkerShift{}, hashes: map[string]bool{}}
}

// deciders returns the record's own decider and the alternative one, both
// with the decider version the record was decided with: the shift reported
// is then the config's alone, not a later version's.
func (w *whatIf) deciders(rec *pb.DecisionRecord) (*decider.Decider, *decider.Decider, error) {
	version := recomputeVersion(rec)
	key := strconv.FormatUint(uint64(version), 10) + "\x00" + rec.GetConfigJson()
	if why, ok := w.bad[key]; ok {
		return nil, nil, fmt.Errorf("%s", why)
	}
	if b, ok := w.base[key]; ok {
		return b, w.alt[key], nil
	}
	fail := func(err error) (*decider.Decider, *decider.Decider, error) {
		w.bad[key] = err.Error()
		return nil, nil, err
	}
	cfg, err := ParseConfig(rec.GetConfigJson())
	if err != nil {
		return fail(err)
	}
	b, err := decider.NewAt(cfg, version)
	if err != nil {
		return fail(err)
	}
	altCfg, err := WithDisagg(cfg, w.o.Disagg, w.o.Enable)
	if err != nil {
		return fail(fmt.Errorf("the alternative config: %w", err))
	}
	a, err := decider.NewAt(altCfg, version)
	if err != nil {
		return fail(err)
	}
	w.base[key], w.alt[key] = b, a
	return b, a, nil
}

func (w *whatIf) add(rep *WhatIfReport, rec *pb.DecisionRecord) {
	rep.Decisions++
	w.hashes[rec.GetConfigHash()] = true
	b, a, err := w.deciders(rec)
	if err != nil {
		rep.Skipped++
		rep.SkipReasons[skipKey(err)]++
		return
	}
	base, err := RecomputeWith(b, rec, &w.dst)
	if err != nil {
		rep.Skipped++
		rep.SkipReasons[skipKey(err)]++
		return
	}
	if string(base.Mode) != rec.GetMode() || string(base.Reason) != rec.GetReason() {
		rep.BaselineMismatches++
	}
	after, err := RecomputeWith(a, rec, &w.dst)
	if err != nil {
		rep.Skipped++
		rep.SkipReasons[skipKey(err)]++
		return
	}
	before := DecisionOf(rec)
	bw, bt := prefillLoad(before)
	aw, at := prefillLoad(after)
	if before.Mode == decider.ModeLocal {
		rep.LocalBefore++
		rep.LoadShift.DecodePoolPrefillTokensBefore += bt
	} else {
		rep.LoadShift.PrefillPoolPrefillTokensBefore += bt
	}
	if after.Mode == decider.ModeLocal {
		rep.LocalAfter++
		rep.LoadShift.DecodePoolPrefillTokensAfter += at
	} else {
		rep.LoadShift.PrefillPoolPrefillTokensAfter += at
	}
	if before.Mode == after.Mode {
		return
	}
	rep.Flips++
	if before.Mode == decider.ModeLocal {
		rep.LocalToRemote++
		rep.LoadShift.MovedToPrefill += at
	} else {
		rep.RemoteToLocal++
		rep.LoadShift.MovedToDecode += at
	}
	w.shift(bw, before, -bt)
	w.shift(aw, after, at)
	w.reasons[[2]string{string(before.Reason), string(after.Reason)}]++
	w.flipISL = append(w.flipISL, float64(after.EffectiveISL))
	if len(w.examples) < w.o.Examples {
		w.examples = append(w.examples, Flip{DecisionID: rec.GetDecisionId(), RequestID: rec.GetRequestId(),
			From: string(before.Mode), To: string(after.Mode), FromReason: string(before.Reason), ToReason: string(after.Reason),
			EffectiveISL: after.EffectiveISL, DecidedBy: string(after.DecidedBy), Distance: after.Distance})
	}
}

func (w *whatIf) shift(worker string, d *decider.Decision, delta int64) {
	pool := string(decider.PoolDecode)
	if d.Mode == decider.ModeRemote {
		pool = string(decider.PoolPrefill)
	}
	k := pool + "/" + worker
	s := w.workers[k]
	if s == nil {
		s = &WorkerShift{Worker: worker, Pool: pool}
		w.workers[k] = s
	}
	s.Delta += delta
}

func (w *whatIf) finish(rep *WhatIfReport) {
	n := rep.Decisions - rep.Skipped
	if n > 0 {
		rep.LocalShareBefore = float64(rep.LocalBefore) / float64(n)
		rep.LocalShareAfter = float64(rep.LocalAfter) / float64(n)
	}
	for k, c := range w.reasons {
		rep.ByReason = append(rep.ByReason, ReasonFlip{From: k[0], To: k[1], Count: c})
	}
	slices.SortFunc(rep.ByReason, func(a, b ReasonFlip) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return strings.Compare(a.From+a.To, b.From+b.To)
	})
	maxISL := 0.0
	for _, v := range w.flipISL {
		maxISL = max(maxISL, v)
	}
	rep.FlippedEffISL = distribution(w.flipISL, islEdges(maxISL))
	for _, s := range w.workers {
		if s.Delta != 0 {
			rep.LoadShift.Workers = append(rep.LoadShift.Workers, *s)
		}
	}
	slices.SortFunc(rep.LoadShift.Workers, func(a, b WorkerShift) int {
		if x, y := abs(a.Delta), abs(b.Delta); x != y {
			if x > y {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Pool+a.Worker, b.Pool+b.Worker)
	})
	if len(rep.LoadShift.Workers) > 20 {
		rep.LoadShift.Workers = rep.LoadShift.Workers[:20]
	}
	if rep.LoadShift.Workers == nil {
		rep.LoadShift.Workers = []WorkerShift{}
	}
	for h := range w.hashes {
		rep.ConfigHashes = append(rep.ConfigHashes, h)
	}
	slices.Sort(rep.ConfigHashes)
	rep.Examples = w.examples
	if rep.Examples == nil {
		rep.Examples = []Flip{}
	}
}

// prefillLoad is the worker that prefills a decision and how many tokens:
// the decode worker prefills the effective ISL locally; the prefill worker
// prefills the prompt minus its own device overlap remotely (the same
// tokens the router's active accounting charges it).
func prefillLoad(d *decider.Decision) (string, int64) {
	if d.Mode == decider.ModeLocal {
		return d.DecodeWorker, d.EffectiveISL
	}
	for i := range d.Candidates {
		c := &d.Candidates[i]
		if c.Pool == decider.PoolPrefill && c.Worker == d.PrefillWorker {
			return c.Worker, max(d.PromptTokens-int64(c.OverlapBlocks)*int64(c.BlockSize), 0)
		}
	}
	return d.PrefillWorker, d.PromptTokens
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// skipKey shortens an error to a stable category for counting.
func skipKey(err error) string {
	s := err.Error()
	if i := strings.Index(s, ": "); i >= 0 && strings.HasPrefix(s, "replay: recompute decision ") {
		s = s[i+2:]
	}
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

// WriteText renders the report for a terminal.
func (r *WhatIfReport) WriteText(w io.Writer) error {
	p := &printer{w: w}
	p.f("what-if: %s\n", orDefault(r.Config, "(each record's own disaggregation config)"))
	p.f("  %d decisions (%d skipped), decided under config(s) %s\n", r.Decisions, r.Skipped, strings.Join(r.ConfigHashes, ", "))
	if r.BaselineMismatches > 0 {
		p.f("  WARNING: %d record(s) do not recompute to their own mode under their own config (run pdrouter explain on them)\n", r.BaselineMismatches)
	}
	for k, v := range r.SkipReasons {
		p.f("  skipped %d: %s\n", v, k)
	}
	p.f("  local share %.2f%% → %.2f%% (%d → %d)\n", 100*r.LocalShareBefore, 100*r.LocalShareAfter, r.LocalBefore, r.LocalAfter)
	p.f("  flips %d: local→remote %d, remote→local %d\n", r.Flips, r.LocalToRemote, r.RemoteToLocal)
	for _, f := range r.ByReason {
		p.f("    %5d  %s → %s\n", f.Count, f.From, f.To)
	}
	if r.Flips > 0 {
		d := r.FlippedEffISL
		p.f("  effective ISL of flipped requests: min %s p25 %s p50 %s p75 %s p90 %s max %s\n", num(d.Min),
			num(d.Percentiles["p25"]), num(d.Percentiles["p50"]), num(d.Percentiles["p75"]), num(d.Percentiles["p90"]), num(d.Max))
		for _, b := range d.Buckets {
			if b.Count > 0 {
				p.f("    [%6s, %6s)  %d\n", num(b.Lo), num(b.Hi), b.Count)
			}
		}
	}
	ls := r.LoadShift
	p.f("  prefill tokens: decode pool %d → %d, prefill pool %d → %d (moved to decode %d, to prefill %d)\n",
		ls.DecodePoolPrefillTokensBefore, ls.DecodePoolPrefillTokensAfter, ls.PrefillPoolPrefillTokensBefore,
		ls.PrefillPoolPrefillTokensAfter, ls.MovedToDecode, ls.MovedToPrefill)
	for _, s := range ls.Workers {
		p.f("    %-8s %-24s %+d\n", s.Pool, s.Worker, s.Delta)
	}
	for _, f := range r.Examples {
		p.f("  e.g. %s (request %s): %s → %s, effective ISL %d, now %s (%s, distance %s)\n", f.DecisionID, f.RequestID,
			f.From, f.To, f.EffectiveISL, f.ToReason, f.DecidedBy, num(f.Distance))
	}
	return p.err
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
