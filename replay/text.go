package replay

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/pdrouter/pdrouter/decider"
)

// WriteText renders an explanation for a terminal: what was decided, the
// candidate table, why that worker and why that mode, then the two checks.
// The JSON form (encoding/json of Explanation) is the one for tools; this
// one may change wording between builds.
func (e *Explanation) WriteText(w io.Writer) error {
	p := &printer{w: w}
	prefill := "-"
	if e.PrefillWorker != nil {
		prefill = *e.PrefillWorker
	}
	p.f("decision %s  request %s  model %s\n", e.DecisionID, e.RequestID, e.Model)
	if e.RetryOf != "" {
		p.f("retry of decision %s (its workers failed before the first token and are unavailable here)\n", e.RetryOf)
	}
	p.f("  decided %s by replica %s (decider v%d), policy %s, config %s\n",
		e.DecidedAt.Format("2006-01-02T15:04:05.000Z07:00"), e.ReplicaID, e.DeciderVersion, e.Policy, e.ConfigHash)
	p.f("  mode %s (%s): decode %s, prefill %s\n", e.Mode, e.Reason, e.DecodeWorker, prefill)
	p.f("  prompt %d tokens, cached %d, effective ISL %d (ratio %.4g)\n", e.PromptTokens, e.CachedTokens, e.EffectiveISL, e.Ratio)
	p.f("  watermark %s\n", watermarkString(e.Watermark))

	p.f("\ncandidates\n")
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "worker\tpool\teligible\toverlap d/h/d\tactive prefill tok\traw prefill blk\toverlap credit\tprefill term\tactive decode blk\treq blk\tshared\tpotential\tcost\tload kv used\tpicked\t")
	for i := range e.Candidates {
		c := &e.Candidates[i]
		elig := "yes"
		if !c.Eligible {
			elig = "no: " + c.Excluded
		}
		load := "-"
		if c.LoadKnown {
			load = fmt.Sprint(c.LoadKVUsedBlocks)
		}
		decodeCols := "-\t-\t-\t-"
		if c.Pool == decider.PoolDecode {
			decodeCols = fmt.Sprintf("%d\t%d\t%d\t%d", c.ActiveDecodeBlocks, c.RequestBlocks, c.SharedActiveBlocks, c.PotentialDecodeBlocks)
		}
		picked := ""
		if c.Picked {
			picked = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d/%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.Worker, c.Pool, elig,
			c.OverlapBlocks, c.HostBlocks, c.DiskBlocks, c.ActivePrefillTokens, num(c.RawPrefillBlocks), num(c.OverlapCredit),
			num(c.PrefillTerm), decodeCols, num(c.Cost), load, picked)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if t := e.Truncation; t != nil {
		p.f("\nthe record is truncated to fit its size budget\n")
		for _, n := range t.Notes {
			p.f("  %s\n", n)
		}
	}

	p.f("\nwhy this decode worker: %s\n", e.Decode.Summary)
	p.f("why this prefill worker: %s\n", e.Prefill.Summary)
	m := e.ModeDecision
	p.f("why %s: %s\n", e.Mode, m.Summary)
	if m.Rule != "" {
		p.f("  rule: %s (decided_by %s", m.Rule, m.DecidedBy)
		if m.Known && m.DecidedBy != "" {
			p.f(", value %s, limit %s, distance %s", num(m.Value), num(m.Limit), num(m.Distance))
		}
		p.f(")\n")
	}
	if s := m.SLO; s != nil {
		p.f("  slo: warm %v (%d samples), local TTFT %s ms / ITL %s ms, remote TTFT %s ms / ITL %s ms, SLOs %s / %s ms, margin %.3f\n",
			s.Warm, s.Samples, num(s.LocalTTFTMs), num(s.LocalITLMs), num(s.RemoteTTFTMs), num(s.RemoteITLMs),
			num(s.TTFTLimitMs), num(s.ITLLimitMs), s.Margin)
	}
	for _, c := range m.Checks {
		if !c.Evaluated {
			continue
		}
		note := ""
		if c.Note != "" {
			note = " [" + c.Note + "]"
		}
		if !c.Known {
			p.f("  check %-24s unknown%s\n", c.Name, note)
			continue
		}
		p.f("  check %-24s value %s, limit %s, hit %v%s\n", c.Name, num(c.Value), num(c.Limit), c.Hit, note)
	}

	pc := e.PureCheck
	p.f("\npure check (recomputed from the record alone): ")
	switch {
	case pc.Error != "":
		p.f("could not run: %s\n", pc.Error)
	case pc.Identical && pc.RecordBytesIdentical:
		p.f("identical, record byte for byte\n")
	case pc.Identical:
		p.f("identical decision\n")
	default:
		p.f("%d difference(s)\n", len(pc.Differences))
	}
	p.diffs(pc.Differences)

	sc := e.StateCheck
	p.f("\nstate check (state rebuilt at the watermark from the log): ")
	switch {
	case !sc.Performed:
		p.f("not performed: %s\n", sc.NotPerformed)
	case sc.Error != "" && len(sc.Differences) == 0 && !sc.Identical:
		p.f("could not run: %s\n", sc.Error)
	case sc.Identical:
		p.f("identical\n")
	case sc.IdenticalWithInFlight:
		p.f("identical once the replica's %d in-flight decision(s) are counted\n", len(sc.InFlight))
	default:
		p.f("%d difference(s)\n", len(sc.Differences))
	}
	if r := sc.Rebuild; r != nil {
		from := "the start of the log"
		if r.Snapshot != "" {
			from = "snapshot " + r.Snapshot
		}
		p.f("  rebuilt from %s, %d records replayed in %d ms\n", from, r.Replayed, r.TookMillis)
		for _, h := range r.HistoryGone {
			p.f("  history gone: %s\n", h)
		}
	}
	for _, sp := range sc.Scope {
		p.f("  scope: %s\n", sp)
	}
	p.diffs(sc.Differences)
	for _, f := range sc.InFlight {
		p.f("  in flight: %s (request %s, %s on %s) at decisions/%d@%d\n", f.DecisionID, f.RequestID, f.Mode, f.DecodeWorker, f.Partition, f.Offset)
	}
	if sc.Error != "" && (len(sc.Differences) > 0 || sc.Identical) {
		p.f("  note: %s\n", sc.Error)
	}
	return p.err
}

type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func (p *printer) diffs(ds []Difference) {
	for _, d := range ds {
		rec, other := string(d.Record), string(d.Other)
		if rec == "" {
			rec = "(absent)"
		}
		if other == "" {
			other = "(absent)"
		}
		p.f("  %s: record %s, now %s\n", d.Field, clipText(rec), clipText(other))
		if d.Cause != "" {
			p.f("    cause: %s\n", d.Cause)
		}
	}
}

func clipText(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

func watermarkString(w map[string]map[string]int64) string {
	var parts []string
	for _, t := range []string{"kv-events", "load", "workers", "decisions", "outcomes"} {
		ps := w[t]
		if len(ps) == 0 {
			continue
		}
		var offs []string
		for i := 0; len(offs) < len(ps); i++ {
			if v, ok := ps[fmt.Sprint(i)]; ok {
				offs = append(offs, fmt.Sprintf("%d=%d", i, v))
			}
			if i > 1<<20 {
				break
			}
		}
		parts = append(parts, t+"{"+strings.Join(offs, " ")+"}")
	}
	if len(parts) == 0 {
		return "(empty)"
	}
	return strings.Join(parts, " ")
}
