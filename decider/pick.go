package decider

import "strings"

// pickMin returns the index in rows of the eligible row with the lowest cost, or -1.
// Exact cost ties go to the lowest TieHash, and (against a 2⁻⁶⁴ hash collision) then to
// the lowest worker id, so the result never depends on the order of rows.
func pickMin(rows []Candidate) int {
	best := -1
	for i := range rows {
		r := &rows[i]
		if !r.Eligible {
			continue
		}
		if best < 0 || better(r, &rows[best]) {
			best = i
		}
	}
	return best
}

// better reports whether a beats b at temperature 0.
func better(a, b *Candidate) bool {
	if a.Cost != b.Cost {
		return a.Cost < b.Cost
	}
	if a.TieHash != b.TieHash {
		return a.TieHash < b.TieHash
	}
	return strings.Compare(a.Worker, b.Worker) < 0
}
