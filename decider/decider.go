package decider

import (
	"slices"
	"strings"
)

// Decider makes routing decisions under one validated config. It holds no mutable
// state, so one Decider serves any number of goroutines; the per-call working memory
// lives in the Decision the caller passes to DecideInto.
type Decider struct {
	cfg               Config
	hash              string
	prefillThreshold  float64
	tokenCost         bool       // Version ≥ 2 (version.go)
	delayCharges      bool       // Version ≥ 3: the slo policy's delay charges (policy_slo.go)
	queueCap          bool       // Version ≥ 4: the slo policy's queue cap (policy_slo.go)
	backlog           bool       // Version ≥ 5: the slo policy's backlog floor and charge (policy_slo.go)
	itlBoundCharge    bool       // Version ≥ 6: the backlog charge bound by local's ITL (policy_slo.go)
	coldSoleDecode    bool       // Version ≥ 7: the cold start's decode guard at the sole decode worker's load sample (policy_slo.go)
	coldSoleBusy      bool       // Version ≥ 8: the cold start's fallback prefill busy threshold at a sole decode worker (policy_slo.go)
	backlogITLGuard   bool       // Version ≥ 9: no ITL guard veto behind a backlog at several decode workers (policy_slo.go)
	coldBacklogSample bool       // Version ≥ 10: the cold start's decode guard at the load sample behind a deep backlog (policy_slo.go)
	triage            bool       // Version ≥ 11: both-miss sends a long prompt remote behind a doomed queue (policy_slo.go)
	soleDecodeISL     bool       // Version ≥ 12: at a sole decode worker the ISL condition decides both-miss and ties (policy_slo.go)
	backlogPick       bool       // Version ≥ 13 and the slo policy: behind a deep backlog the pick's decode term at the load sample (policy_slo.go)
	itlSpanPrompt     bool       // Version ≥ 14: no running requests' ITL charge for a prompt prefilled within slo_itl_ms (policy_slo.go)
	backlogMissLimit  bool       // Version ≥ 14: both-miss behind a backlog judged by the charges at SLOBacklogMissChargeLimit (policy_slo.go)
	coldSoleISL       bool       // Version ≥ 15: at a sole decode worker the cold start's decode guard spares a prompt the ISL condition keeps local (policy_slo.go)
	soleResidence     bool       // Version ≥ 15: at a sole decode worker the residence charge in place of the next requests' charge (policy_slo.go)
	rule              policyRule // of cfg.Disagg.Policy
	mode              modeRule   // of cfg.Disagg.Policy, when it has one
}

// New validates cfg (Config.Validate) and returns a Decider for it. The registry check
// for separate pools is separate (CheckPools) because the registry is not known yet when
// flags are parsed.
func New(cfg Config) (*Decider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	thr, _ := cfg.PrefillBusyThreshold()
	spec, _ := LookupPolicy(cfg.Disagg.Policy) // Validate accepts only registered policies
	dc := &Decider{cfg: cfg, hash: cfg.Hash(), prefillThreshold: thr, rule: spec.rule, mode: spec.mode}
	dc.setVersion(Version)
	return dc, nil
}

// Config returns the config the Decider runs with.
func (dc *Decider) Config() Config { return dc.cfg }

// ConfigHash returns Config.Hash(), the version recorded in every decision.
func (dc *Decider) ConfigHash() string { return dc.hash }

// Decide is DecideInto with a fresh Decision. Use DecideInto on a hot path.
func (dc *Decider) Decide(v View, r *Request) (*Decision, error) {
	dst := new(Decision)
	if err := dc.DecideInto(dst, v, r); err != nil {
		return nil, err
	}
	return dst, nil
}

// DecideInto decides r against the state v and writes the decision into dst, reusing
// dst's memory: in steady state it does not allocate.
//
// It fails with a *RequestError (errors.Is ErrInvalidRequest) for impossible inputs, and
// with a *NoWorkerError (errors.Is ErrNoDecodeWorker) when no decode worker of the
// model is eligible. On error dst holds no meaningful decision.
//
// The result is a pure function of (config, r, the state v presents): no clock, no
// unseeded randomness, no dependence on the order in which v lists workers.
func (dc *Decider) DecideInto(dst *Decision, v View, r *Request) error {
	if err := r.validate(); err != nil {
		return err
	}
	dst.reset()
	dst.RequestID, dst.Model, dst.PromptTokens = r.ID, r.Model, r.PromptTokens
	dst.Policy, dst.ConfigHash = dc.cfg.Disagg.Policy, dc.hash

	workers := v.Workers()
	s := &dst.scratch
	nDecode := s.collect(workers, r.Model)
	s.matchState(v, r, workers, nDecode)
	rows := dc.buildRows(dst, v, r, workers, nDecode)
	decodeRows, prefillRows := rows[:nDecode], rows[nDecode:]

	reqKey := requestKey(r.ID)
	for i := range rows {
		rows[i].TieHash = Hash64(tieHash(reqKey, rows[i].Worker))
	}
	di := dc.pick(decodeRows, r.ID, seedDecodePCG1, seedDecodePCG2)
	if di < 0 {
		return noDecodeWorker(r.Model, decodeRows)
	}
	d := &decodeRows[di]
	d.Picked = true
	var p *Candidate
	if pi := dc.pick(prefillRows, r.ID, seedPrefillPCG1, seedPrefillPCG2); pi >= 0 {
		p = &prefillRows[pi]
		p.Picked = true
	}

	dst.DecodeWorker, dst.BlockSize = d.Worker, d.BlockSize
	dst.CachedTokens = cachedTokens(TierOverlap{Device: d.OverlapBlocks, Host: d.HostBlocks, Disk: d.DiskBlocks}, d.BlockSize)
	dst.EffectiveISL, dst.Ratio = effectiveISL(r.PromptTokens, dst.CachedTokens)
	if dc.mode != nil && p != nil && dc.cfg.ConditionalDisagg {
		dst.scratch.fit = latencyFitOf(v)
		p = dc.mode(dc, dst, d, p)
	} else {
		dc.decideMode(dst, d, p)
	}
	if dst.Mode == ModeRemote {
		dst.PrefillWorker = p.Worker
	}
	return nil
}

// reset clears the decision but keeps its memory.
func (dst *Decision) reset() {
	rows, s := dst.Candidates[:0], dst.scratch
	*dst = Decision{Candidates: rows, scratch: s}
}

// collect puts the refs of the model's decode workers, then of its prefill workers, in
// s.order, each group sorted by worker id, and returns the number of decode workers.
// Sorting is what makes the decision independent of the view's order.
//
// Sorting 160 ids costs more than the rest of the selection, so collect first checks
// whether the order left by the previous decision in this scratch space is still exactly
// the sorted order for this view (same model, and for each group: the same number of
// matching workers, every ref matching, ids strictly increasing). If so it is reused;
// the check proves it is the one order a fresh sort would produce, so the decision
// cannot depend on what was decided before.
func (s *scratch) collect(workers []WorkerInfo, model string) int {
	nDecode, nPrefill := 0, 0
	for i := range workers {
		if workers[i].Model == model {
			switch workers[i].Pool {
			case PoolDecode:
				nDecode++
			case PoolPrefill:
				nPrefill++
			}
		}
	}
	if len(s.order) == nDecode+nPrefill && s.orderStillValid(workers, model, nDecode) {
		return nDecode
	}
	s.order = s.order[:0]
	for i := range workers {
		if workers[i].Pool == PoolDecode && workers[i].Model == model {
			s.order = append(s.order, int32(i))
		}
	}
	for i := range workers {
		if workers[i].Pool == PoolPrefill && workers[i].Model == model {
			s.order = append(s.order, int32(i))
		}
	}
	byID := func(a, b int32) int { return strings.Compare(workers[a].ID, workers[b].ID) }
	slices.SortFunc(s.order[:nDecode], byID)
	slices.SortFunc(s.order[nDecode:], byID)
	return nDecode
}

// orderStillValid reports whether s.order is the sorted order of the view's candidates.
// The caller has checked that its length is the number of candidates.
func (s *scratch) orderStillValid(workers []WorkerInfo, model string, nDecode int) bool {
	for k, ref := range s.order {
		if int(ref) >= len(workers) {
			return false
		}
		w := &workers[ref]
		pool := PoolPrefill
		if k < nDecode {
			pool = PoolDecode
		}
		if w.Pool != pool || w.Model != model {
			return false
		}
		// Strictly increasing ids within a group also rule out a repeated ref.
		if k > 0 && k != nDecode && workers[s.order[k-1]].ID >= w.ID {
			return false
		}
	}
	return true
}

// matchState asks the view for overlaps (both pools) and shared active blocks (decode
// pool), once per distinct block size among the candidates. Decode workers come first in
// s.order, so a block size that any decode worker has is first seen among them, and its
// single MatchActive call covers every decode worker of that size.
func (s *scratch) matchState(v View, r *Request, workers []WorkerInfo, nDecode int) {
	n := len(workers)
	s.overlap = resize(s.overlap, n)
	s.shared = resize(s.shared, n)
	clear(s.overlap)
	clear(s.shared)
	s.sizes = s.sizes[:0]
	for k, ref := range s.order {
		bs := workers[ref].BlockSize
		if bs <= 0 || slices.Contains(s.sizes, bs) {
			continue
		}
		s.sizes = append(s.sizes, bs)
		chain := r.chainFor(bs)
		if len(chain) == 0 {
			continue
		}
		v.MatchPrefix(bs, chain, s.overlap)
		if k < nDecode {
			v.MatchActive(bs, chain, s.shared)
		}
	}
}

// buildRows writes one candidate row per collected worker, in s.order.
func (dc *Decider) buildRows(dst *Decision, v View, r *Request, workers []WorkerInfo, nDecode int) []Candidate {
	s := &dst.scratch
	rows := slices.Grow(dst.Candidates[:0], len(s.order))[:len(s.order)]
	atSample := dc.sloBacklogPick(v, workers, s.order[nDecode:])
	for k, ref := range s.order {
		w := &workers[ref]
		row := &rows[k]
		*row = Candidate{Worker: w.ID, Pool: w.Pool, BlockSize: w.BlockSize,
			TotalKVBlocks: w.TotalKVBlocks, MaxNumBatchedTokens: w.MaxNumBatchedTokens}
		if ls, ok := v.Load(int(ref)); ok {
			row.LoadKnown, row.LoadKVUsedBlocks, row.LoadPrefillTokens = true, ls.KVUsedBlocks, ls.ActivePrefillTokens
		}
		if row.Excluded = exclusion(w); row.Excluded != "" {
			continue
		}
		row.Eligible = true
		chainLen := len(r.chainFor(w.BlockSize))
		decode := k < nDecode
		in := costInputs{
			prompt:        r.PromptTokens,
			blockSize:     w.BlockSize,
			overlap:       clampOverlap(s.overlap[ref], chainLen),
			active:        v.Active(int(ref)),
			decode:        decode,
			overlapCredit: dc.cfg.OverlapScoreCredit,
			prefillScale:  dc.cfg.PrefillLoadScale,
			tokenCost:     dc.tokenCost,
			residentCap:   -1,
		}
		if decode && atSample && row.LoadKnown {
			in.residentCap = max(row.LoadKVUsedBlocks, 0)
		}
		if decode {
			in.sharedActive = int64(min(max(s.shared[ref], 0), chainLen))
		}
		scoreRow(row, &in)
		if dc.cfg.RouterMode != RouterModeKV {
			row.Cost = 0 // rendezvous hashing: the tie-break alone picks
		}
	}
	dst.Candidates = rows
	return rows
}

// pick selects one row of a pool: the minimum cost at temperature 0, a seeded softmax
// draw above it.
func (dc *Decider) pick(rows []Candidate, requestID string, seed1, seed2 uint64) int {
	if dc.cfg.Temperature > 0 {
		return pickSoftmax(rows, dc.cfg.Temperature, hashSeed(requestID, seed1), hashSeed(requestID, seed2))
	}
	return pickMin(rows)
}

func noDecodeWorker(model string, rows []Candidate) error {
	e := &NoWorkerError{Model: model, Registered: len(rows)}
	for i := range rows {
		switch rows[i].Excluded {
		case ExcludedUnhealthy:
			e.Unhealthy++
		case ExcludedUnavailable:
			e.Unavailable++
		case ExcludedNoBlockSize:
			e.NoBlockSize++
		}
	}
	return e
}

// resize returns a slice of length n, reusing s's memory when it is large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
