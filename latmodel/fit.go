package latmodel

import (
	"math"

	"github.com/pdrouter/pdrouter/decider"
)

// Ridge is the regularization of the fit, relative to each feature's own scale: the
// normal equations are scaled to a unit diagonal and Ridge is added to it (not to the
// intercept's). It keeps the fit defined when a feature never varies on a path (the
// transfer of local prefills) or two features move together (the queue of the
// prefilling worker and of the decode worker, for local prefills).
const Ridge = 1e-6

// computeFit solves, per path and target, the ridge-regularized least squares of the
// window's sums. Deterministic: sums are read in ascending bucket order and every
// operation has a fixed order.
func (m *Model) computeFit() *decider.LatencyFit {
	const k = decider.LatencyK
	ks := m.sortedBuckets()
	if len(ks) == 0 {
		return nil
	}
	f := &decider.LatencyFit{}
	any := false
	for p := range decider.NumPaths {
		for t := range decider.NumTargets {
			var n float64
			var A [k][k]float64
			var b [k]float64
			var yy float64
			for _, key := range ks {
				a := &m.buckets[key].acc[p][t]
				n += float64(a.n)
				i := 0
				for r := range k {
					for c := r; c < k; c++ {
						A[r][c] += float64(a.xx[i])
						i++
					}
					b[r] += float64(a.xy[r])
				}
				yy += float64(a.yy)
			}
			if n < 1 {
				continue
			}
			any = true
			for r := range k {
				for c := range r {
					A[r][c] = A[c][r]
				}
			}
			beta, rss := solveRidge(&A, &b, yy)
			const unit = 1.0 / targetScale
			f.Samples[p][t] = int64(n)
			for i := range beta {
				f.Coef[p][t][i] = beta[i] * unit
			}
			dof := max(n-float64(k), 1)
			f.Sigma[p][t] = math.Sqrt(max(rss, 0)/dof) * unit
			f.Mean[p][t] = b[0] / n * unit
		}
	}
	if !any {
		return nil
	}
	return f
}

// solveRidge solves (A + ridge) β = b by Gaussian elimination with partial pivoting
// on the Jacobi-scaled system, and returns β and the residual sum of squares
// yy − 2βᵀb + βᵀAβ of the unregularized problem. Features with no energy (a zero
// diagonal) get a zero coefficient.
func solveRidge(A *[decider.LatencyK][decider.LatencyK]float64, b *[decider.LatencyK]float64, yy float64) ([decider.LatencyK]float64, float64) {
	const k = decider.LatencyK
	var s [k]float64
	for i := range k {
		if A[i][i] > 0 {
			s[i] = 1 / math.Sqrt(A[i][i])
		}
	}
	var M [k][k + 1]float64
	for r := range k {
		for c := range k {
			M[r][c] = float64(A[r][c]*s[r]) * s[c]
		}
		M[r][k] = float64(b[r] * s[r])
		if r > 0 {
			M[r][r] += Ridge
		}
		if s[r] == 0 {
			// No energy: pin the coefficient at 0.
			for c := range k + 1 {
				M[r][c] = 0
			}
			M[r][r] = 1
		}
	}
	for col := range k {
		piv := col
		for r := col + 1; r < k; r++ {
			if math.Abs(M[r][col]) > math.Abs(M[piv][col]) {
				piv = r
			}
		}
		M[col], M[piv] = M[piv], M[col]
		if math.Abs(M[col][col]) < 1e-300 {
			continue
		}
		for r := range k {
			if r == col || M[r][col] == 0 {
				continue
			}
			f := M[r][col] / M[col][col]
			for c := col; c <= k; c++ {
				M[r][c] -= float64(f * M[col][c])
			}
		}
	}
	var beta [k]float64
	for i := range k {
		if math.Abs(M[i][i]) >= 1e-300 {
			beta[i] = M[i][k] / M[i][i] * s[i]
		}
		if math.IsNaN(beta[i]) || math.IsInf(beta[i], 0) {
			beta[i] = 0
		}
	}
	rss := yy
	for r := range k {
		rss -= 2 * float64(beta[r]*b[r])
		for c := range k {
			rss += float64(float64(beta[r]*A[r][c]) * beta[c])
		}
	}
	return beta, rss
}
