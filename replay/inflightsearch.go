package replay

import (
	"math/bits"
	"slices"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Which in-flight decisions had the deciding replica counted when it read
// its view? Any subset of the candidates is possible (requests finish their
// appends in any order), and trying one costs a reopen of the rebuilt store,
// so the subsets are narrowed before any is tried:
//
//  1. A candidate that loads only workers whose rows agree cannot have been
//     counted (relevantInFlight).
//  2. Prefill tokens are additive: a counted decision adds exactly its
//     prefill tokens to one row (the effective ISL to its decode worker for
//     a local prefill; the prompt minus the prefill worker's device overlap
//     to that worker for a remote one, as the statestore's accounting
//     charges them). So a counted subset must sum, row by row, to the
//     difference between the record's active_prefill_tokens and the
//     rebuilt state's. Enumerating subsets and checking these sums is plain
//     arithmetic; the few subsets that pass are then tried for real,
//     largest first (decode blocks are deduplicated by hash, which only the
//     store can count).

// maxEnumerate bounds the candidates of one row whose subsets are
// enumerated (2^22 sums); beyond it the prefixes in decision order are tried.
const maxEnumerate = 22

// maxTries bounds the subsets tried on the store.
const maxTries = 64

// relevantInFlight keeps the in-flight decisions that load a worker (as its
// decode worker, or the prefill worker of a remote prefill) whose row
// differs.
func relevantInFlight(fs []InFlight, diffs []Difference) []InFlight {
	rows := map[string]bool{}
	for _, d := range diffs {
		if d.Worker != "" {
			rows[d.Worker] = true
		}
	}
	var out []InFlight
	for _, f := range fs {
		if rows[f.DecodeWorker] || (f.Mode == string(decider.ModeRemote) && rows[f.PrefillWorker]) {
			out = append(out, f)
		}
	}
	return out
}

// rowID names a candidate row by pool and worker.
type rowID struct {
	pool   decider.Pool
	worker string
}

// prefillCharge is the row a decision adds prefill tokens to, and how many.
func prefillCharge(d *pb.DecisionRecord) (rowID, int64) {
	if d.GetMode() == string(decider.ModeLocal) {
		return rowID{decider.PoolDecode, workerID(d.GetDecodeWorker())}, int64(d.GetEffectiveIsl())
	}
	pw := workerID(d.GetPrefillWorker())
	cached := int64(0)
	for _, c := range d.GetCandidates() {
		if c.GetPool() == pb.Pool_POOL_PREFILL && workerID(c.GetWorker()) == pw {
			cached = int64(c.GetOverlapBlocks()) * int64(c.GetBlockSize())
			break
		}
	}
	return rowID{decider.PoolPrefill, pw}, max(int64(d.GetPromptTokens())-cached, 0)
}

// candidateSubsets lists the subsets of cands worth trying, largest first.
//
// Each candidate charges its prefill tokens to exactly one row, so the
// sums decompose: the candidates of each row must sum to that row's
// difference on their own. Each row's group is enumerated separately (2^k
// for a group of k, at most maxEnumerate), and the solutions of the groups
// are combined. Candidates that charge nothing (a local prefill of an
// effective ISL of 0) are unconstrained by the sums; all of them, then none,
// or every combination when there are few, are tried with each solution.
func candidateSubsets(cands []InFlight, recorded, rebuilt *decider.Decision) [][]int {
	if len(cands) == 0 {
		return nil
	}
	// The prefill-token difference each row must be explained by.
	want := map[rowID]int64{}
	for i := range recorded.Candidates {
		c := &recorded.Candidates[i]
		for j := range rebuilt.Candidates {
			o := &rebuilt.Candidates[j]
			if o.Worker == c.Worker && o.Pool == c.Pool {
				want[rowID{c.Pool, c.Worker}] = c.ActivePrefillTokens - o.ActivePrefillTokens
			}
		}
	}
	groups := map[rowID][]int{}
	tok := make([]int64, len(cands))
	var free []int
	for i, f := range cands {
		id, t := prefillCharge(f.rec)
		tok[i] = t
		if _, known := want[id]; !known || t == 0 {
			free = append(free, i)
			continue
		}
		groups[id] = append(groups[id], i)
	}
	// Every row with a difference needs a group that can explain it.
	for id, w := range want {
		if w != 0 && len(groups[id]) == 0 {
			return prefixes(len(cands))
		}
	}
	ids := make([]rowID, 0, len(groups))
	for id := range groups {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b rowID) int {
		if a.pool != b.pool {
			return int(a.pool[0]) - int(b.pool[0])
		}
		if a.worker < b.worker {
			return -1
		}
		if a.worker > b.worker {
			return 1
		}
		return 0
	})
	// Solutions per group, each a list of candidate indexes.
	combos := [][]int{{}}
	for _, id := range ids {
		g := groups[id]
		if len(g) > maxEnumerate {
			return prefixes(len(cands))
		}
		var sols [][]int
		for mask := uint32(0); mask < 1<<len(g); mask++ {
			var sum int64
			for m := mask; m != 0; m &= m - 1 {
				sum += tok[g[bits.TrailingZeros32(m)]]
			}
			if sum != want[id] {
				continue
			}
			var sol []int
			for m := mask; m != 0; m &= m - 1 {
				sol = append(sol, g[bits.TrailingZeros32(m)])
			}
			sols = append(sols, sol)
			if len(sols) >= maxTries {
				break
			}
		}
		if len(sols) == 0 {
			return nil // no subset explains this row's prefill tokens
		}
		var next [][]int
		for _, c := range combos {
			for _, s := range sols {
				if len(next) < maxTries {
					next = append(next, append(slices.Clone(c), s...))
				}
			}
		}
		combos = next
	}
	var frees [][]int
	if len(free) <= 4 {
		for mask := 0; mask < 1<<len(free); mask++ {
			var f []int
			for k := range free {
				if mask&(1<<k) != 0 {
					f = append(f, free[k])
				}
			}
			frees = append(frees, f)
		}
	} else {
		frees = [][]int{free, nil}
	}
	var out [][]int
	for _, c := range combos {
		for _, f := range frees {
			s := append(slices.Clone(c), f...)
			if len(s) > 0 && len(out) < maxTries {
				slices.Sort(s)
				out = append(out, s)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b []int) int { return len(b) - len(a) })
	return out
}

// prefixes lists the prefixes of n candidates in decision order, longest
// first: the fallback when the sums cannot narrow the search.
func prefixes(n int) [][]int {
	var out [][]int
	for k := n; k > 0 && len(out) < maxTries; k-- {
		s := make([]int, k)
		for i := range s {
			s[i] = i
		}
		out = append(out, s)
	}
	return out
}
