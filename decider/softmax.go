package decider

import (
	"math"
	"math/rand/v2"
)

// pickSoftmax samples an eligible row with probability softmax(−normalized cost / T),
// where costs are min–max normalized to [0, 1] over the eligible rows (all equal costs
// give a uniform draw). It records each row's probability and returns the index, or -1.
//
// The draw comes from a PCG seeded with two hashes of the request id, so a request id
// always samples the same worker from the same state (Dynamo samples from an unseeded
// source). Rows are visited in their canonical order (worker id), so the cumulative sum,
// and with it the choice, does not depend on the order of the view.
func pickSoftmax(rows []Candidate, temperature float64, seed1, seed2 uint64) int {
	lo, hi := math.Inf(1), math.Inf(-1)
	eligible := 0
	for i := range rows {
		if rows[i].Eligible {
			lo = min(lo, rows[i].Cost)
			hi = max(hi, rows[i].Cost)
			eligible++
		}
	}
	if eligible == 0 {
		return -1
	}
	span := hi - lo
	var total float64
	for i := range rows {
		r := &rows[i]
		if !r.Eligible {
			continue
		}
		norm := 0.0
		if span > 0 {
			norm = (r.Cost - lo) / span
		}
		r.Probability = math.Exp(-norm / temperature)
		total += r.Probability
	}
	var pcg rand.PCG
	pcg.Seed(seed1, seed2)
	u := float64(pcg.Uint64()>>11) * 0x1p-53 // uniform in [0, 1)
	target := u * total
	picked := -1
	var cum float64
	for i := range rows {
		r := &rows[i]
		if !r.Eligible {
			continue
		}
		cum += r.Probability
		r.Probability /= total
		if picked < 0 && target < cum {
			picked = i
		}
	}
	if picked < 0 { // rounding left target at the very top: take the last eligible row
		for i := len(rows) - 1; i >= 0; i-- {
			if rows[i].Eligible {
				return i
			}
		}
	}
	return picked
}
