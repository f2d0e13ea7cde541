package replay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// TuneOptions configure Tune.
type TuneOptions struct {
	// TargetLocal is the wanted share of requests prefilled locally, in [0, 1].
	TargetLocal float64
	Logger      *slog.Logger
}

// TuneReport is the threshold guidance conditional-disagg.md asks the
// product to automate: the distributions thresholds should come from, and
// candidate configs with the local share each gives on the window, computed
// by recomputing every decision under it, not estimated from percentiles.
type TuneReport struct {
	Decisions int `json:"decisions"`
	Skipped   int `json:"skipped"`
	// EffectiveISL and Ratio are the window's distributions.
	EffectiveISL Distribution `json:"effective_isl"`
	Ratio        Distribution `json:"effective_isl_ratio"`
	// Base is the disaggregation config of the window's latest decision,
	// the starting point of every candidate.
	Base          string  `json:"base_config"`
	RecordedLocal float64 `json:"recorded_local_share"`
	TargetLocal   float64 `json:"target_local_share"`
	// MaxLocalShare is the most local traffic the ISL rules can give on
	// this window (every threshold at its most permissive).
	MaxLocalShare float64         `json:"max_local_share"`
	Candidates    []TuneCandidate `json:"candidates"`
	Recommended   *TuneCandidate  `json:"recommended"`
	// Policies are, for comparison and never recommended, every policy of the
	// decider's table under the window's latest config, in the table's order.
	Policies []TuneCandidate `json:"policies"`
	Notes    []string        `json:"notes,omitempty"`
}

// TuneCandidate is one config and the local share it gives on the window.
type TuneCandidate struct {
	Name                 string  `json:"name"`
	Policy               string  `json:"policy"`
	Config               string  `json:"config"`
	EffISLThreshold      int64   `json:"eff_isl_threshold"`
	EffISLRatioThreshold float64 `json:"eff_isl_ratio_threshold"`
	LocalShare           float64 `json:"local_share"`
	Local                int     `json:"local"`
	// Gap = LocalShare − target.
	Gap float64 `json:"gap"`
}

// tuner recomputes a window of decisions under candidate configs. The
// records' own router settings are kept; only the disaggregation config
// changes, with conditional disaggregation on (it is what is being tuned).
type tuner struct {
	recs  []*pb.DecisionRecord
	views []*RecordView
	reqs  []*decider.Request
	cfgs  []decider.Config
	dst   decider.Decision
}

// localCount recomputes every record under disagg and counts local modes.
func (t *tuner) localCount(disagg decider.DisaggConfig) (int, error) {
	n := 0
	cache := map[string]*decider.Decider{}
	for i, rec := range t.recs {
		cfg := t.cfgs[i]
		cfg.Disagg, cfg.ConditionalDisagg = disagg, true
		version := recomputeVersion(rec)
		key := strconv.FormatUint(uint64(version), 10) + "\x00" + string(cfg.CanonicalJSON())
		dc := cache[key]
		if dc == nil {
			var err error
			if dc, err = decider.NewAt(cfg, version); err != nil {
				return 0, err
			}
			cache[key] = dc
		}
		if err := dc.DecideInto(&t.dst, t.views[i], t.reqs[i]); err != nil {
			return 0, fmt.Errorf("replay: recompute decision %s: %w", rec.GetDecisionId(), err)
		}
		if t.dst.Mode == decider.ModeLocal {
			n++
		}
	}
	return n, nil
}

// Tune reads the window and recommends thresholds for the target share.
func Tune(ctx context.Context, src DecisionSource, o TuneOptions) (*TuneReport, error) {
	if !(o.TargetLocal >= 0 && o.TargetLocal <= 1) {
		return nil, fmt.Errorf("replay: target local share %g is not in [0, 1]", o.TargetLocal)
	}
	recs, err := CollectDecisions(ctx, src)
	if err != nil {
		return nil, err
	}
	rep := &TuneReport{TargetLocal: o.TargetLocal, Candidates: []TuneCandidate{}, Policies: []TuneCandidate{}}
	t := &tuner{}
	var effs, ratios []float64
	local := 0
	for _, rec := range recs {
		rep.Decisions++
		cfg, err := ParseConfig(rec.GetConfigJson())
		if err != nil {
			rep.Skipped++
			continue
		}
		t.recs, t.cfgs = append(t.recs, rec), append(t.cfgs, cfg)
		t.views, t.reqs = append(t.views, NewRecordView(rec)), append(t.reqs, RequestOf(rec))
		effs = append(effs, float64(rec.GetEffectiveIsl()))
		ratios = append(ratios, rec.GetEffectiveIslRatio())
		if rec.GetMode() == string(decider.ModeLocal) {
			local++
		}
	}
	n := len(t.recs)
	if n == 0 {
		return rep, fmt.Errorf("replay: no decision to tune from in the window")
	}
	rep.RecordedLocal = float64(local) / float64(n)
	maxEff := slices.Max(effs)
	rep.EffectiveISL = distribution(effs, islEdges(maxEff))
	rep.Ratio = distribution(ratios, ratioEdges())

	window := t.cfgs[n-1].Disagg
	base := window
	tuned, err := islPolicyFor(window.Policy)
	if err != nil {
		return nil, err
	}
	if tuned != window.Policy {
		base.Policy = tuned
		rep.Notes = append(rep.Notes, fmt.Sprintf("the window's policy is %s, which reads no ISL threshold; candidates use %s", window.Policy, tuned))
	}
	rep.Base = disaggJSON(base)
	if !t.cfgs[n-1].ConditionalDisagg {
		rep.Notes = append(rep.Notes, "conditional disaggregation is off in the window's config: the candidates turn it on (--router-conditional-disagg)")
	}

	eval := func(name string, d decider.DisaggConfig) (TuneCandidate, error) {
		k, err := t.localCount(d)
		c := TuneCandidate{Name: name, Policy: string(d.Policy), Config: disaggJSON(d), EffISLThreshold: d.EffISLThreshold,
			EffISLRatioThreshold: d.EffISLRatioThreshold, Local: k, LocalShare: float64(k) / float64(n)}
		c.Gap = c.LocalShare - o.TargetLocal
		return c, err
	}
	add := func(c TuneCandidate, err error) (TuneCandidate, error) {
		if err == nil {
			rep.Candidates = append(rep.Candidates, c)
		}
		return c, err
	}
	if _, err := add(eval("base (the window's latest config)", base)); err != nil {
		return nil, err
	}

	// Every policy of the table at the window's thresholds, for comparison. A
	// record's prefill busy threshold is recorded after inheriting the queue
	// threshold, so an unset one means there is none to compare a load policy with.
	for _, spec := range decider.Policies() {
		d := window
		d.Policy = spec.Name
		if spec.ReadsField(decider.FieldPrefillBusyThreshold) && !d.PrefillBusyThreshold.Set {
			rep.Notes = append(rep.Notes, fmt.Sprintf("policy %s is not compared: it reads prefill_busy_threshold, which the window's config does not set", spec.Name))
			continue
		}
		c, err := eval("policy "+string(spec.Name)+" at the window's thresholds", d)
		if err != nil {
			return nil, err
		}
		rep.Policies = append(rep.Policies, c)
	}

	// 1. The absolute threshold, ratio threshold kept: local share only
	// grows with it (eff < T), so a search over the thresholds that change
	// anything (each distinct effective ISL + 1, and 0) finds the closest.
	thr := []int64{0}
	for _, e := range sortedUnique(effs) {
		thr = append(thr, int64(e)+1)
	}
	absCand, err := search(len(thr), o.TargetLocal, func(i int) (TuneCandidate, error) {
		d := base
		d.EffISLThreshold = thr[i]
		return eval("eff_isl_threshold for the target", d)
	})
	if err != nil {
		return nil, err
	}
	add(absCand, nil)

	// 2. The ratio threshold, absolute threshold kept.
	rs := []float64{0}
	uniq := sortedUnique(ratios)
	for i, r := range uniq {
		next := 1.0
		if i+1 < len(uniq) {
			next = uniq[i+1]
		}
		if r < 1 {
			rs = append(rs, roundAbove(r, next))
		}
	}
	rs = append(rs, 1)
	ratioCand, err := search(len(rs), o.TargetLocal, func(i int) (TuneCandidate, error) {
		d := base
		d.EffISLRatioThreshold = rs[i]
		return eval("eff_isl_ratio_threshold for the target", d)
	})
	if err != nil {
		return nil, err
	}
	add(ratioCand, nil)

	// 3. The absolute threshold with the ratio check at its most
	// permissive (1.0): the most local traffic isl_bounding can reach.
	open := base
	open.EffISLRatioThreshold = 1
	openCand, err := search(len(thr), o.TargetLocal, func(i int) (TuneCandidate, error) {
		d := open
		d.EffISLThreshold = thr[i]
		return eval("eff_isl_threshold for the target, ratio threshold 1.0", d)
	})
	if err != nil {
		return nil, err
	}
	add(openCand, nil)
	most := open
	most.EffISLThreshold = thr[len(thr)-1]
	mostCand, err := eval("", most)
	if err != nil {
		return nil, err
	}
	rep.MaxLocalShare = mostCand.LocalShare
	if o.TargetLocal > rep.MaxLocalShare+0.02 {
		uncached := 0
		for _, r := range ratios {
			if r >= 1 {
				uncached++
			}
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("the target is out of reach: at most %.2f%% of this window can go local under the ISL rules, because %d of %d requests have nothing cached (ratio 1.0), which the strict ratio check never bypasses, and the decode guard or aggregated requests fix others",
			100*rep.MaxLocalShare, uncached, n))
	}

	// 4. The reference system's rule of thumb: the absolute threshold at
	// the target quantile of effective ISL, ratio check at 1.0. It lets
	// about that share pass the absolute check; the other rules move it.
	q := open
	q.EffISLThreshold = int64(quantile(sortedCopy(effs), o.TargetLocal))
	if _, err := add(eval(fmt.Sprintf("eff_isl_threshold at p%g of effective ISL, ratio threshold 1.0", math.Round(100*o.TargetLocal)), q)); err != nil {
		return nil, err
	}
	// 5. Reference points: thresholds at the quartiles, ratio kept.
	for _, p := range []string{"p25", "p50", "p75"} {
		d := base
		d.EffISLThreshold = int64(rep.EffectiveISL.Percentiles[p])
		if _, err := add(eval("eff_isl_threshold at "+p+" of effective ISL", d)); err != nil {
			return nil, err
		}
	}
	best := 0
	for i, c := range rep.Candidates {
		if math.Abs(c.Gap) < math.Abs(rep.Candidates[best].Gap)-1e-12 {
			best = i
		}
	}
	rec := rep.Candidates[best]
	rep.Recommended = &rec
	if math.Abs(rec.Gap) > 0.02 && o.TargetLocal <= rep.MaxLocalShare+0.02 {
		rep.Notes = append(rep.Notes, "no candidate is within 2% of the target: many decisions share one effective ISL")
	}
	return rep, nil
}

// islPolicyFor returns the policy whose ISL thresholds tune moves for a window decided
// under p: p itself when it reads them, or else the first policy of the decider's table
// that reads both of them and every key p reads, so that the window's other settings
// keep their effect.
func islPolicyFor(p decider.Policy) (decider.Policy, error) {
	spec, ok := decider.LookupPolicy(p)
	if !ok {
		return "", fmt.Errorf("replay: the window's policy %q is not one of this build (%s)", p, strings.Join(decider.PolicyNames(), ", "))
	}
	readsISL := func(s *decider.PolicySpec) bool {
		return s.ReadsField(decider.FieldEffISLThreshold) && s.ReadsField(decider.FieldEffISLRatioThreshold)
	}
	if readsISL(&spec) {
		return p, nil
	}
	for _, s := range decider.Policies() {
		if readsISL(&s) && !slices.ContainsFunc(spec.Reads, func(f string) bool { return !s.ReadsField(f) }) {
			return s.Name, nil
		}
	}
	return "", fmt.Errorf("replay: no policy reads the ISL thresholds together with what policy %s reads (%s)", p, strings.Join(spec.Reads, ", "))
}

func sortedCopy(values []float64) []float64 {
	s := slices.Clone(values)
	slices.Sort(s)
	return s
}

// search finds, among n candidates whose local share does not decrease with
// the index, the one closest to the target, with O(log n) evaluations.
func search(n int, target float64, eval func(int) (TuneCandidate, error)) (TuneCandidate, error) {
	lo, hi := 0, n-1
	var firstErr error
	at := map[int]TuneCandidate{}
	get := func(i int) TuneCandidate {
		if c, ok := at[i]; ok {
			return c
		}
		c, err := eval(i)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		at[i] = c
		return c
	}
	// Smallest index whose share reaches the target.
	for lo < hi {
		mid := (lo + hi) / 2
		if get(mid).LocalShare >= target {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	best := get(lo)
	if lo > 0 {
		if prev := get(lo - 1); math.Abs(prev.Gap) < math.Abs(best.Gap) {
			best = prev
		}
	}
	return best, firstErr
}

// roundAbove returns the shortest decimal in (lo, hi]: a threshold that
// admits lo (ratio < threshold) and changes nothing else, written the way a
// person would type it.
func roundAbove(lo, hi float64) float64 {
	for digits := 1; digits <= 17; digits++ {
		scale := math.Pow(10, float64(digits))
		v := math.Floor(lo*scale+1) / scale
		if v > lo && v <= hi {
			return v
		}
	}
	return math.Nextafter(lo, 2)
}

func sortedUnique(v []float64) []float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return slices.Compact(s)
}

// disaggJSON renders a disaggregation config as the JSON of
// --router-conditional-disagg-config, every key present.
func disaggJSON(d decider.DisaggConfig) string {
	opt := func(o decider.OptFloat) string {
		if !o.Set {
			return "null"
		}
		return exact(o.Value)
	}
	s := fmt.Sprintf(`{"policy":%q,"eff_isl_threshold":%d,"eff_isl_ratio_threshold":%s,"prefill_busy_threshold":%s,"decode_busy_threshold":%s,"decode_busy_source":%q`,
		d.Policy, d.EffISLThreshold, exact(d.EffISLRatioThreshold), opt(d.PrefillBusyThreshold), opt(d.DecodeBusyThreshold), d.DecodeBusySource)
	if d.Policy == decider.PolicySLO {
		s += fmt.Sprintf(`,"slo_ttft_ms":%s,"slo_itl_ms":%s,"slo_min_samples":%d,"slo_itl_guard":%t`,
			exact(d.SLOTTFTMs), exact(d.SLOITLMs), d.SLOMinSamples, d.SLOITLGuard)
	}
	return s + "}"
}

// exact prints a float with the shortest digits that read back to it, so a
// recommended config applies exactly the threshold that was evaluated.
func exact(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// WriteText renders the report for a terminal.
func (r *TuneReport) WriteText(w io.Writer) error {
	p := &printer{w: w}
	p.f("tune: %d decisions (%d skipped), recorded local share %.2f%%, target %.2f%%\n", r.Decisions, r.Skipped, 100*r.RecordedLocal, 100*r.TargetLocal)
	p.f("  base config %s; at most %.2f%% can go local under the ISL rules\n", r.Base, 100*r.MaxLocalShare)
	line := func(name string, d Distribution, f func(float64) string) {
		p.f("  %-20s", name)
		for _, q := range percentileNames {
			p.f(" %s %s", q.name, f(d.Percentiles[q.name]))
		}
		p.f("  max %s\n", f(d.Max))
	}
	line("effective ISL", r.EffectiveISL, num)
	line("effective ISL ratio", r.Ratio, func(v float64) string { return fmt.Sprintf("%.3f", v) })
	p.f("  candidates (local share recomputed on every decision of the window):\n")
	for _, c := range r.Candidates {
		p.f("    %6.2f%% (%+.2f)  %-52s %s\n", 100*c.LocalShare, 100*c.Gap, c.Name, c.Config)
	}
	if r.Recommended != nil {
		p.f("  recommended: --router-conditional-disagg-config '%s'  (local share %.2f%%)\n", r.Recommended.Config, 100*r.Recommended.LocalShare)
	}
	if len(r.Policies) > 0 {
		p.f("  every policy at the window's thresholds (for comparison):\n")
		for _, c := range r.Policies {
			p.f("    %6.2f%% (%+.2f)  %-52s %s\n", 100*c.LocalShare, 100*c.Gap, c.Policy, c.Config)
		}
	}
	for _, n := range r.Notes {
		p.f("  note: %s\n", n)
	}
	return p.err
}
