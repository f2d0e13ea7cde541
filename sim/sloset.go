package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxSLOSets bounds the SLO sets of one comparison: each adds a column per policy.
const MaxSLOSets = 8

// maxSLOMs bounds an SLO bound of a set (one hour): larger is no service level.
const maxSLOMs = 3_600_000

// meets is the goodput rule: the request completed within the TTFT bound and, if it
// has an ITL (≥ 2 tokens), within the ITL bound. A one-token request has no ITL to miss.
func (f Fate) meets(s SLO) bool {
	return f.TTFT <= s.TTFT && (!f.HasITL || f.ITL <= s.ITL)
}

// GoodUnder counts the requests of the run that met s: the report's Good, scored
// under another SLO. The run itself does not depend on the SLO (except through a
// policy that reads its own SLO from its config, such as cond-slo), so one run
// scores every set.
func (r *Report) GoodUnder(s SLO) int {
	n := 0
	for _, f := range r.Fates {
		if f.meets(s) {
			n++
		}
	}
	return n
}

// GoodputUnder is GoodUnder ÷ Requests, the report's Goodput under s.
func (r *Report) GoodputUnder(s SLO) float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.GoodUnder(s)) / float64(r.Requests)
}

// String writes the set as --slo reads it: TTFT ms / ITL ms.
func (s SLO) String() string {
	return fmtMs(s.TTFT) + "/" + fmtMs(s.ITL)
}

func fmtMs(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64)
}

// ParseSLOSets reads --slo: comma-separated sets "TTFT_MS/ITL_MS" ("2000/50,1000/30"),
// each bound a positive number of milliseconds up to an hour, at most MaxSLOSets sets,
// no set twice.
func ParseSLOSets(list string) ([]SLO, error) {
	parts := strings.Split(list, ",")
	if len(parts) > MaxSLOSets {
		return nil, fmt.Errorf("--slo: %d sets; at most %d", len(parts), MaxSLOSets)
	}
	var out []SLO
	for _, p := range parts {
		s, err := ParseSLO(p)
		if err != nil {
			return nil, fmt.Errorf("--slo: %w", err)
		}
		for _, o := range out {
			if o == s {
				return nil, fmt.Errorf("--slo: %s appears twice", s)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// ParseSLO reads one set "TTFT_MS/ITL_MS" ("1000/25"), each bound a positive number
// of milliseconds up to an hour.
func ParseSLO(set string) (SLO, error) {
	set = strings.TrimSpace(set)
	ts, is, ok := strings.Cut(set, "/")
	t, err1 := parseSLOMs(ts)
	i, err2 := parseSLOMs(is)
	if !ok || err1 != nil || err2 != nil {
		return SLO{}, fmt.Errorf("%q is not a set like 2000/50 (TTFT ms / ITL ms, each in (0, %d])", set, maxSLOMs)
	}
	return SLO{TTFT: t, ITL: i}, nil
}

func parseSLOMs(s string) (time.Duration, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !(v > 0 && v <= maxSLOMs) {
		return 0, fmt.Errorf("bad bound %q", s)
	}
	d := time.Duration(v * float64(time.Millisecond))
	if d <= 0 {
		return 0, fmt.Errorf("bad bound %q", s)
	}
	return d, nil
}
