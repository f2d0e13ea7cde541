package decider

import "slices"

// KeepRows chooses the rows of a candidate table that a record of bounded
// size keeps when the table has more than k rows, and returns their
// indices in table order (decode rows, then prefill rows, each by worker
// id); nil when every row fits.
//
// The record exists so the decision can be explained and recomputed. What
// explains it is the rows that competed with the winners, so those are the
// ones kept: in each pool the picked row first, then the eligible rows by
// the decider's own ranking (cost, then tie hash, then worker id, as
// pickMin orders them), then the ineligible rows by worker id. Each pool
// gets half of k, and a pool with fewer rows than its half leaves the rest
// to the other, so neither pool's winner nor its runners-up are crowded
// out by a huge other pool. k is at least 2, so both picks always fit.
//
// The choice depends only on the rows, never on their order in memory or
// on anything outside them, so replicas and replays keep the same rows.
func KeepRows(rows []Candidate, k int, dst []int) []int {
	if len(rows) <= k {
		return nil
	}
	k = max(k, 2)
	nDecode := 0
	for i := range rows {
		if rows[i].Pool == PoolDecode {
			nDecode++
		}
	}
	nPrefill := len(rows) - nDecode
	prefillQuota := min(nPrefill, max(k/2, k-nDecode))
	decodeQuota := k - prefillQuota

	dst = dst[:0]
	dst = appendBest(dst, rows, PoolDecode, decodeQuota)
	dst = appendBest(dst, rows, PoolPrefill, prefillQuota)
	slices.Sort(dst)
	return dst
}

// appendBest appends the indices of the best n rows of pool to dst, in no
// particular order. dst[start:] is kept as a heap with the worst kept row
// at its root, so a table of N rows costs about N comparisons, not a sort.
func appendBest(dst []int, rows []Candidate, pool Pool, n int) []int {
	if n <= 0 {
		return dst
	}
	start := len(dst)
	for i := range rows {
		if rows[i].Pool != pool {
			continue
		}
		h := dst[start:]
		switch {
		case len(h) < n:
			dst = append(dst, i)
			siftUp(rows, dst[start:], len(h))
		case outranks(rows, i, h[0]):
			h[0] = i
			siftDown(rows, h, 0)
		}
	}
	return dst
}

// outranks reports whether row a is kept before row b: the picked row
// first, then eligible rows by the decider's own ranking (cost, tie hash,
// worker id, as pickMin orders them), then ineligible rows in table order,
// which is worker id order. It is a total order (worker ids are unique in a
// table), so which rows are kept does not depend on the order they are
// visited in.
func outranks(rows []Candidate, a, b int) bool {
	ra, rb := &rows[a], &rows[b]
	switch {
	case ra.Picked != rb.Picked:
		return ra.Picked
	case ra.Eligible != rb.Eligible:
		return ra.Eligible
	case ra.Eligible:
		return better(ra, rb)
	}
	return a < b
}

// siftUp and siftDown keep h a heap whose root is the row every other row
// outranks.
func siftUp(rows []Candidate, h []int, j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !outranks(rows, h[p], h[j]) {
			return
		}
		h[p], h[j] = h[j], h[p]
		j = p
	}
}

func siftDown(rows []Candidate, h []int, j int) {
	for {
		worst, l, r := j, 2*j+1, 2*j+2
		if l < len(h) && outranks(rows, h[worst], h[l]) {
			worst = l
		}
		if r < len(h) && outranks(rows, h[worst], h[r]) {
			worst = r
		}
		if worst == j {
			return
		}
		h[j], h[worst] = h[worst], h[j]
		j = worst
	}
}
