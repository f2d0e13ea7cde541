package sim

import (
	"fmt"
	"strconv"
	"strings"
)

// Shape is a fleet's split of GPUs into prefill and decode workers, written NPMD
// ("2P6D": 2 prefill, 6 decode).
type Shape struct{ Prefill, Decode int }

func (s Shape) String() string { return fmt.Sprintf("%dP%dD", s.Prefill, s.Decode) }

// MaxShapes bounds the shapes of one sweep: each is a whole comparison.
const MaxShapes = 32

// ParseShapes reads a comma-separated list of shapes ("2P6D,3P5D"). Every shape needs
// at least one decode worker and all must have the same number of GPUs, since a
// sweep compares splits of one fleet.
func ParseShapes(list string) ([]Shape, error) {
	parts := strings.Split(list, ",")
	if len(parts) > MaxShapes {
		return nil, fmt.Errorf("--shapes: %d shapes; at most %d", len(parts), MaxShapes)
	}
	var out []Shape
	for _, p := range parts {
		p = strings.TrimSpace(p)
		ps, ds, ok := strings.Cut(strings.TrimSuffix(strings.ToUpper(p), "D"), "P")
		pn, err1 := strconv.Atoi(ps)
		dn, err2 := strconv.Atoi(ds)
		if !ok || !strings.HasSuffix(strings.ToUpper(p), "D") || err1 != nil || err2 != nil || pn < 0 || dn < 1 {
			return nil, fmt.Errorf("--shapes: %q is not a shape like 2P6D (≥ 0 prefill, ≥ 1 decode)", p)
		}
		s := Shape{pn, dn}
		if err := (FleetConfig{Prefill: pn, Decode: dn}).Validate(); err != nil {
			return nil, fmt.Errorf("--shapes: %s: %w", s, err)
		}
		if len(out) > 0 && pn+dn != out[0].Prefill+out[0].Decode {
			return nil, fmt.Errorf("--shapes: %s has %d GPUs, %s has %d: a sweep splits one fleet", s, pn+dn, out[0], out[0].Prefill+out[0].Decode)
		}
		out = append(out, s)
	}
	return out, nil
}
