package decider

// The slo policy (docs/slo-policy.md): predict TTFT and mean ITL for the local path and
// for each prefill candidate with the online latency model the view serves, and take
// the path with the best expected goodput under slo_ttft_ms and slo_itl_ms, counting
// what a local prefill does to the requests the decode worker already runs. Until the
// model has slo_min_samples samples on every path and target it falls back to
// isl_or_load with the decode guard.

// Fallback thresholds of the cold start, used when the config leaves them unset: the
// prefill busy threshold of `sim compare`'s load policies, and a decode guard at 50% of
// the decode worker's KV blocks, tight because a cold start that overloads scarce
// decode workers leaves a backlog the learned policy inherits.
const (
	SLOFallbackPrefillBusy = 2.0
	SLOFallbackDecodeBusy  = 0.5
	// SLOFallbackPrefillBusySoleDecode is the cold start's fallback prefill busy
	// threshold in a fleet of one decode worker (decider version 8). There a prompt the
	// prefill-busy condition sends local is prefilled on the worker every running
	// request decodes on, and each such prefill lengthens all of their steps; the cold
	// start decides most of such a run (2,866 of 3,983 decisions at synthetic 7P1D ×1.5,
	// 1000/25, with version 7). Measured on the twelve one-decode-worker cells of the
	// tight-SLO grid: at 2.0, 75.8% at 7P1D ×1.5 against isl_bounding's 76.6%, and
	// conversation 3P1D ×0.5 at 4 GPUs 56.6% against 57.5%; at 3.0, 77.1% and 57.5%, no
	// cell below the best static setup by more than 0.5 pp; at 4.0, 77.2% but 55.7%; at
	// 8.0 (as with the ISL condition alone) synthetic 3P1D ×1 at 4 GPUs fell from 54.4% to
	// 34.7%: there the prefill-busy condition is what beats isl_bounding's 36.2%
	// (docs/slo-policy.md, "At the user's SLO").
	SLOFallbackPrefillBusySoleDecode = 3.0
	// SLOTieMargin is how much expected goodput local prefill must gain over remote
	// prefill to be chosen: within it the paths tie, and a tie goes remote. What a
	// local prefill costs the decode worker's later requests is only partly in the
	// prediction (their outcomes arrive seconds after it), so a local prefill must
	// earn its place; two predictions that both meet the SLO cannot tell the paths
	// apart, and taking local for them moves prompt computation onto the pool that
	// decodes.
	SLOTieMargin = 0.01
	// SLOMissFactor: when both paths are predicted to miss, local prefill must miss by
	// at most this fraction of remote's miss to be taken. A local prefill adds work to
	// a decode worker that is, when both paths miss, often the fleet's bottleneck,
	// and what that costs the requests decoding there is not in this request's
	// prediction.
	SLOMissFactor = 0.5
	// SLOPrefillGuardBusy is where the prefill guard (sloPrefillGuard) sees a prefill
	// worker as busy: queued prompt tokens past this many times its
	// max_num_batched_tokens, far past the cold start's 2.0, so that it takes over
	// only from a model whose queues have run away, not from one that weighs a
	// moderate queue against a local prefill. At 2.0 it cost 0.4–1.5 pp in most cells
	// of the Mooncake conversation grid; at 8.0 no cell lost (docs/slo-policy.md).
	SLOPrefillGuardBusy = 8.0
	// SLOMissChargeLimit: when both paths are predicted to miss, a local prefill is
	// also refused if it is expected to cost the other requests this much more goodput
	// than the remote prefill would (its charges less remote's delay charge): half a
	// request. This request probably misses either way, and it must not take others
	// down with it.
	SLOMissChargeLimit = 0.5
	// SLOBacklogMissChargeLimit is SLOMissChargeLimit where the charges alone decide a
	// both-miss (behind a backlog, local's ITL past slo_itl_ms; sloBacklogCharge), from
	// decider version 14: a quarter of a request. There the decode worker's steps are
	// full already, and the charges, linear in the prompt, price each long local prefill
	// at the margin while together they fill the steps every request there decodes in: on
	// the Mooncake synthetic trace at 1P7D ×2.25, 1000/25, at half a request (version
	// 13) the slo policy prefilled 1,590 prompts of over 8,192 tokens locally against isl_or_load's
	// 1,449, its short local prompts met the SLO 623 times of 1,250 against 683 of 1,220,
	// and the cell kept 37.1% against 38.7%; at a quarter, 41.9%. At 0.1 it kept 36.2%,
	// at 0.375 38.2%, at 1 38.0% (docs/slo-policy.md, "Beyond the grid").
	SLOBacklogMissChargeLimit = 0.25
	// SLOQueueCapLocalShare and SLOQueueCapFraction are the queue cap's
	// (sloQueueCap): in a fleet whose local path took fewer than this share of the
	// model's TTFT samples, a decode worker may hold local prefills for at most this
	// fraction of slo_ttft_ms of prefill time.
	SLOQueueCapLocalShare = 0.05
	SLOQueueCapFraction   = 0.5
	// SLOTriageFactor is where the overload triage (sloTriage) sees the remote path's
	// queue as one that cannot drain: remote's predicted TTFT past this many times
	// slo_ttft_ms, most of it the wait ahead of this prompt. Far past the backlog's 1 ×,
	// so that it leaves alone a backlog that drains: on the Mooncake synthetic trace at
	// 1P7D ×2, 1000/25, remote's predicted TTFT stayed under 15 s and the long prompts
	// taken local behind it met the SLO one time in three (at 10 × the triage cost that
	// cell 1.4 pp); on the conversation trace at 4 GPUs past ×1 it was 105–320 s from the
	// first warm decision on (docs/slo-policy.md, "Beyond the grid").
	SLOTriageFactor = 20.0
)

// latencyFitOf returns the view's latency model fit, or nil when the view has none.
func latencyFitOf(v View) *LatencyFit { return v.LatencyFit() }

// sloMode is the slo policy's modeRule.
func sloMode(dc *Decider, dst *Decision, d, p *Candidate) *Candidate {
	cfg := &dc.cfg.Disagg
	s := &dst.SLO
	s.Evaluated, s.TTFTLimitMs, s.ITLLimitMs = true, cfg.SLOTTFTMs, cfg.SLOITLMs
	s.RunningRequests = d.ActiveRequests
	fit := dst.scratch.fit
	if fit != nil {
		s.Fit = *fit
		s.Samples = minSamples(fit)
	}
	if !fit.Warm(cfg.SLOMinSamples) {
		return sloColdStart(dc, dst, d, p)
	}
	s.Warm = true

	// Local: the prompt's uncached part is computed on the decode worker, behind the
	// prompts already queued there.
	local := PathInputs(PathLocal, dst.PromptTokens, dst.EffectiveISL, d, nil)
	s.LocalTTFTMs = fit.Predict(PathLocal, TargetTTFT, &local)
	s.LocalITLMs = fit.Predict(PathLocal, TargetITL, &local)
	selfLocal := dc.sloMeet(fit, PathLocal, s.LocalTTFTMs, s.LocalITLMs)

	// Remote: every eligible prefill worker, the best predicted TTFT wins (the row the
	// cost picked first, then the table's order, on a tie).
	best := p
	var bestIn LatencyInputs
	bestTTFT := -1.0
	for _, c := range [2]bool{true, false} {
		for i := range dst.Candidates {
			row := &dst.Candidates[i]
			if row.Pool != PoolPrefill || !row.Eligible || (row == p) != c {
				continue
			}
			in := PathInputs(PathRemote, dst.PromptTokens, dst.EffectiveISL, d, row)
			if t := fit.Predict(PathRemote, TargetTTFT, &in); bestTTFT < 0 || t < bestTTFT {
				best, bestIn, bestTTFT = row, in, t
			}
		}
	}
	if best != p {
		p.Picked, best.Picked = false, true
	}
	s.RemoteTTFTMs = bestTTFT
	s.RemoteITLMs = fit.Predict(PathRemote, TargetITL, &bestIn)
	// A backlogged prefill worker (sloBacklog): remote is judged on its queue's prefill
	// time and charged the requests it holds up there, and the decode worker's running
	// requests are counted by the KV it holds.
	var backlogged bool
	var backlogCharge float64
	if dc.backlog {
		s.RemoteTTFTMs, backlogCharge, backlogged = sloBacklog(cfg, fit, best, &bestIn, s.RemoteTTFTMs)
	}
	s.RemoteGoodput = dc.sloMeet(fit, PathRemote, s.RemoteTTFTMs, s.RemoteITLMs)

	// Others: the decode worker's running requests, with this request joining them,
	// with and without its prompt prefilled there.
	others := LatencyInputs{DecodeRequests: d.ActiveRequests + 1, DecodeBlocks: d.PotentialDecodeBlocks,
		DecodePrefill: d.ActivePrefillTokens, DecodeFill: decodeFill(d), DecodeRecentLocal: d.RecentLocalPrefill}
	s.OthersBaseITLMs = fit.Predict(PathRemote, TargetITL, &others)
	others.DecodePrefill += dst.EffectiveISL
	others.DecodeRecentLocal += dst.EffectiveISL
	s.OthersITLMs = fit.Predict(PathRemote, TargetITL, &others)
	sigma := fit.Sigma[PathRemote][TargetITL]
	running := float64(d.ActiveRequests)
	if backlogged {
		running *= residentShare(d)
	}
	if dc.itlSpanPrompt && withinITLSpan(cfg, fit, dst.EffectiveISL) {
		running = 0
	}
	loss := max(running*(meetProbability(s.OthersBaseITLMs, sigma, cfg.SLOITLMs)-
		meetProbability(s.OthersITLMs, sigma, cfg.SLOITLMs)), 0)

	// Next: the requests sent to this decode worker after this one, each taken to be
	// like this one on the remote path, find this prompt queued there and counted in
	// its recent local prefill. A local prefill looks harmless to the requests running
	// when it is decided; what it costs is the TTFT of those that come after it, on a
	// worker whose steps it took. They are counted as many as the worker runs now:
	// over the recent-local window a worker takes in about as many requests as it
	// holds (Little's law, with a residence of the window's order), and an idle
	// worker delays nobody. Without this charge a run of local prefills piles onto a
	// scarce decode worker before their outcomes come back.
	next := bestIn
	next.DecodePrefill += dst.EffectiveISL
	next.DecodeRecentLocal += dst.EffectiveISL
	s.NextTTFTMs = fit.Predict(PathRemote, TargetTTFT, &next)
	s.NextITLMs = fit.Predict(PathRemote, TargetITL, &next)
	if dc.soleResidence && soleDecodeWorker(dst) {
		// At a sole decode worker the same requests are priced by their admission.
		loss += dc.sloResidenceCharge(fit, dst, d)
	} else {
		loss += float64(d.ActiveRequests) * max(s.RemoteGoodput-dc.sloMeet(fit, PathRemote, s.NextTTFTMs, s.NextITLMs), 0)
	}
	if dc.delayCharges {
		dc.sloDelayCharges(dst, fit, d, best, &bestIn)
		loss += s.LocalDelayCharge
	}
	if dc.itlBoundCharge && !sloBacklogCharge(cfg, s) {
		backlogCharge = 0
	}
	s.RemoteDelayCharge = max(s.RemoteDelayCharge, backlogCharge)
	s.LocalGoodput = selfLocal - loss
	s.Margin = s.LocalGoodput - (s.RemoteGoodput - s.RemoteDelayCharge)
	s.RemoteDecodeTTFTMs = fit.DecodeSide(PathRemote, TargetTTFT, &bestIn)

	var local2 bool
	switch {
	case max(selfLocal, s.RemoteGoodput) < 0.5:
		// Both paths are expected to miss the SLO: the difference of two small tail
		// probabilities does not choose, and the path that misses by less for this
		// request is not the better one when it is the overloaded one. Local must miss
		// by at most SLOMissFactor of remote's miss (the larger of TTFT and ITL over
		// their SLOs), and remote's TTFT must be mostly the prefill side's: when the
		// decode worker's own state explains most of it, the decode worker is the
		// bottleneck, and a local prefill adds to it.
		local2 = max(s.LocalTTFTMs/cfg.SLOTTFTMs, s.LocalITLMs/cfg.SLOITLMs) <=
			SLOMissFactor*max(s.RemoteTTFTMs/cfg.SLOTTFTMs, s.RemoteITLMs/cfg.SLOITLMs) &&
			2*s.RemoteDecodeTTFTMs <= s.RemoteTTFTMs &&
			(!dc.delayCharges || loss-s.RemoteDelayCharge < SLOMissChargeLimit)
		if dc.itlBoundCharge && backlogged && !sloBacklogCharge(cfg, s) {
			// Behind a backlog, with the decode worker's steps too full for local's
			// ITL to meet: this request misses on either path, and only what it
			// costs the others tells them apart (sloBacklogCharge).
			limit := SLOMissChargeLimit
			if dc.backlogMissLimit {
				limit = SLOBacklogMissChargeLimit
			}
			local2 = loss-s.RemoteDelayCharge < limit
		}
		if local2 && dc.triage && sloTriage(cfg, fit, dst, bestIn.Uncached) {
			local2 = false
		}
		if dc.sloSoleDecodeISL(dst) {
			// At a sole decode worker the ISL condition decides a both-miss.
			local2 = shortPrompt(dst, cfg)
		}
	case s.Margin > -SLOTieMargin && s.Margin <= SLOTieMargin && dc.sloSoleDecodeISL(dst):
		// And a tie.
		local2 = shortPrompt(dst, cfg)
	default:
		// Local must be better by more than SLOTieMargin; ties go remote.
		local2 = s.Margin > SLOTieMargin
	}
	var queueMs float64
	capped := false
	if local2 && dc.queueCap {
		queueMs, capped = sloQueueCap(cfg, fit, d, dst.EffectiveISL)
		local2 = !capped
	}
	guard := !local2 && sloPrefillGuard(dc, dst, d, best)
	local2 = local2 || guard
	dst.PolicyBypass = local2
	dst.DecidedBy, dst.Distance = CheckSLOGoodput, s.Margin
	switch {
	case !local2 && capped:
		dst.Mode, dst.Reason = ModeRemote, ReasonSLODeniedQueueCap
		dst.DecidedBy, dst.Distance = CheckSLOQueueCap, queueMs-SLOQueueCapFraction*cfg.SLOTTFTMs
	case !local2:
		dst.Mode, dst.Reason = ModeRemote, ReasonSLORemoteBetter
	case cfg.SLOITLGuard && d.ActiveRequests > 0 && s.OthersBaseITLMs <= cfg.SLOITLMs && s.OthersITLMs > cfg.SLOITLMs &&
		!dc.sloITLGuardStandsAside(dst, backlogged):
		// The guard: a local prefill must not push the running requests past the ITL
		// SLO, whatever the goodput arithmetic says.
		dst.Mode, dst.Reason = ModeRemote, ReasonSLODeniedITLGuard
		dst.DecidedBy, dst.Distance = CheckSLOITLGuard, s.OthersITLMs-cfg.SLOITLMs
	case guard:
		dst.Mode, dst.Reason = ModeLocal, ReasonSLOPrefillGuard
		dst.DecidedBy, dst.Distance = CheckPrefillBusy, dst.PrefillBusy.Value-dst.PrefillBusy.Limit
	default:
		dst.Mode, dst.Reason = ModeLocal, ReasonSLOLocalBetter
	}
	return best
}

// sloTriage reports whether a local prefill chosen with both paths predicted to miss is
// refused (decider version 11): behind a remote queue that cannot drain (remote's
// predicted TTFT past SLOTriageFactor × slo_ttft_ms, and this prompt's own prefill time
// at backlogMsPerToken at most half of it), a prompt the ISL condition would not keep
// local (shortPrompt) goes remote.
//
// Such a fleet is overloaded on both sides, and the request misses on either path. What
// tells the paths apart is where its miss costs the others: a long prompt on a decode
// worker fills the steps every request there decodes in, and joins the local queue the
// others' prompts wait in; in a queue that cannot drain it costs only requests that
// miss already. Neither the miss factor nor the charges see it: the fit's terms are
// linear, and behind a queue that deep its coefficients put the wait on the decode
// counts. On the Mooncake conversation trace at 1P3D ×1.5 at 4 GPUs, 1000/25, the warm
// policy took 3,057 such prompts local, none of which met the SLO, and the 857 short
// prompts it took local met it 0 times, where isl_bounding, which keeps exactly those
// local, met it 793 times (docs/slo-policy.md, "Beyond the grid"). A short prompt,
// mostly cached, costs the decode worker little and stays judged as before. The wait
// ahead, not remote's whole TTFT, tells such a queue: a prompt of 54k tokens is 7.7 s of
// prefill on its own, and sent remote on that count at synthetic 2P6D ×2, 500/20, it
// cost the run 11.7 pp.
func sloTriage(cfg *DisaggConfig, fit *LatencyFit, dst *Decision, uncached int64) bool {
	remote := dst.SLO.RemoteTTFTMs
	own := backlogMsPerToken(fit) * float64(max(uncached, 0))
	return remote > SLOTriageFactor*cfg.SLOTTFTMs && 2*own <= remote && !shortPrompt(dst, cfg)
}

// shortPrompt reports whether the ISL condition of isl_bounding would keep the prompt
// local (islCondition, without recording its checks): an empty prompt, or an effective
// ISL and ratio both under their thresholds.
func shortPrompt(dst *Decision, cfg *DisaggConfig) bool {
	return dst.PromptTokens == 0 || dst.EffectiveISL < cfg.EffISLThreshold && dst.Ratio < cfg.EffISLRatioThreshold
}

// sloSoleDecodeISL reports whether the ISL condition (shortPrompt) decides where the
// goodput does not (decider version 12): in a fleet of one decode worker, when both
// paths are predicted to miss, and when the margin is within SLOTieMargin. A prompt
// the condition keeps local is prefilled locally, any other goes remote, whatever the
// miss factor, the charges and the overload triage chose; the queue cap and the guards
// still apply after it.
//
// There every request of the fleet decodes on the worker the prompt would prefill on.
// A short prompt, mostly cached, is a fraction of one step there whichever path it
// takes, while the remote path adds a prefill queue and a transfer, and lengthens the
// queue every remote request of the fleet waits in; a long one fills the steps of every
// running request and holds up the start of every remote request's decode. The model's
// own terms do not tell the paths apart there: the decode worker's counts explain most
// of remote's TTFT, so the both-miss rule sent short prompts remote, and the charges,
// linear, priced a long local prefill at the margin. On the Mooncake conversation trace
// at 3P1D ×0.75 at 4 GPUs, 1000/25, version 11 sent 1,157 short prompts remote with both
// paths predicted to miss, of which 198 met the SLO, where isl_bounding kept them local
// and 476 met it, and prefilled 9.6% of the requests locally against isl_bounding's
// 20.6%: 29.2% goodput against 33.9 (docs/slo-policy.md, "Beyond the grid"). Where the
// goodput chooses, with a margin past SLOTieMargin, it still decides: at synthetic 3P1D
// ×1 at 4 GPUs it keeps 58.7% against isl_bounding's 36.2.
func (dc *Decider) sloSoleDecodeISL(dst *Decision) bool {
	return dc.soleDecodeISL && soleDecodeWorker(dst)
}

// sloITLGuardStandsAside reports whether the ITL guard lets a local prefill through
// (decider version 9): behind a backlogged prefill worker (sloBacklog), in a fleet of
// several decode workers. There the remote path cannot meet the SLO: a veto sends the
// prompt into a queue where it misses, and its prefill there delays every request
// behind it until the backlog drains, while the goodput comparison has already charged
// the local path for the running requests' ITL (step 3, counted by the KV the decode
// worker holds). On the Mooncake synthetic trace at 1P7D ×2, 1000/25, the guard vetoed
// 183 local prefills behind the backlog, of which 5 met the SLO, and 49 of the same
// requests met it under isl_or_load. At a sole decode worker every request of the
// fleet decodes on the worker the prompt would prefill on, and the guard stays: without
// it conversation 3P1D ×0.5 at 4 GPUs fell from 57.5% to 55.4% (docs/slo-policy.md,
// "At the user's SLO").
func (dc *Decider) sloITLGuardStandsAside(dst *Decision, backlogged bool) bool {
	return dc.backlogITLGuard && backlogged && !soleDecodeWorker(dst)
}

// sloDelayCharges sets the delay charges of both paths (LocalDelayCharge,
// RemoteDelayCharge, TypicalTTFTMs). A prefill occupies the worker that computes it,
// and the requests that arrive there meanwhile wait behind it: on a decode worker,
// prefill chunks fill the steps' token budget, so it admits no new request until the
// local prefills queued there are done; on a prefill worker, the queue is first come,
// first served. The model predicts this request's own latency on each path, not what
// its prefill does to the requests after it; where decode workers are few, that is
// what a long local prefill costs, holding up the remote requests waiting to start
// decoding there (docs/slo-policy.md). So each path is charged, for the requests
// expected to arrive at its worker while that worker is busy through this prefill, the
// goodput a typical request loses to the delay this prefill adds:
//
//	charge = arrivals × (P(typical meets) − P(typical + delay meets))
//	arrivals = RecentRequests / RecentLocalWindow × busy
//
// with the TTFT SLO and the remote residual. Local: busy is the time to this prompt's
// first token there (its predicted TTFT, at least the prefill time of the prompt
// tokens queued there and its own), and the delay is this prompt's share of it.
// Remote: busy is the prefill time of the picked worker's queue and this prompt, and
// the delay this prompt's prefill time. The prefill time per token is the remote TTFT
// fit's coefficient of uncached tokens: the path whose TTFT is mostly prefill. The
// typical request is the remote path's mean TTFT, the path most requests take when a
// worker is busy. Charging both paths keeps a fleet whose prefill workers are the
// scarce ones taking local prefills: there a remote prefill delays more requests.
func (dc *Decider) sloDelayCharges(dst *Decision, fit *LatencyFit, d, best *Candidate, bestIn *LatencyInputs) {
	s := &dst.SLO
	perToken := prefillMsPerToken(fit)
	s.TypicalTTFTMs = fit.Mean[PathRemote][TargetTTFT]
	queued := float64(d.ActivePrefillTokens + dst.EffectiveISL)
	busy := max(s.LocalTTFTMs, perToken*queued)
	share := busy
	if queued > 0 {
		share = busy * float64(dst.EffectiveISL) / queued
	}
	s.LocalDelayCharge = dc.delayCharge(fit, d.RecentRequests, busy, share)
	if best != nil {
		s.RemoteDelayCharge = dc.delayCharge(fit, best.RecentRequests, perToken*float64(bestIn.Queued+bestIn.Uncached),
			perToken*float64(bestIn.Uncached))
	}
}

// prefillMsPerToken is the prefill time of one uncached prompt token: the remote TTFT
// fit's coefficient of uncached tokens (the path whose TTFT is mostly prefill), floored
// at 0.
func prefillMsPerToken(fit *LatencyFit) float64 { return max(fit.Coef[PathRemote][TargetTTFT][1], 0) }

// sloBacklog returns the remote TTFT to judge the picked prefill worker on and the
// backlog charge of a remote prefill there. When the prompt tokens queued on that
// worker and this prompt's would take longer than slo_ttft_ms to prefill, the worker
// is backlogged: a request sent there cannot have its first token in time, whatever
// the fit predicts, so its TTFT is at least that prefill time (the floor), and the
// remote path is charged the requests that arrive at the worker while this prompt is
// prefilled (its arrival rate, recent_requests over RecentLocalWindow, times this
// prompt's prefill time), at least.
//
// The fit cannot see a backlog for what it is. It learns from outcomes, and the
// requests stuck in a growing queue report their TTFT only when they leave it; the
// router counts a request waiting for its remote prefill on its decode worker, so
// that worker's request and block counts grow with the queue and the fit puts the
// wait on them; and the delay charges judge a delay on the remote path's typical
// request, which past the backlog misses already, so they charge nothing for
// lengthening it. At a tight ITL SLO the ITL terms of a local prefill then outweigh a
// remote path that predicts a miss either way, and every prompt goes to the queue:
// on the Mooncake synthetic trace at 1P7D ×2, 1000/25, the one prefill worker's queue
// reached 33M tokens (docs/slo-policy.md, "At the user's SLO"). Every prompt a
// backlogged worker takes delays all that come after it until the backlog drains, and
// the ones it pushes past the SLO on the way down are those that arrive in its own
// prefill time: that is the charge, which weighs the queue against the ITL a local
// prefill costs. Below the backlog the delay charges price the queue as before.
func sloBacklog(cfg *DisaggConfig, fit *LatencyFit, best *Candidate, in *LatencyInputs, ttftMs float64) (floorMs, charge float64, backlogged bool) {
	perToken := backlogMsPerToken(fit)
	// Summed as floats: the queued tokens come from the log, and an int64 sum could wrap.
	backlogMs := perToken * (float64(max(in.Queued, 0)) + float64(max(in.Uncached, 0)))
	if best == nil || !(backlogMs > cfg.SLOTTFTMs) {
		return ttftMs, 0, false
	}
	rate := float64(max(best.RecentRequests, 0)) / float64(RecentLocalWindow.Milliseconds())
	return max(ttftMs, backlogMs), rate * perToken * float64(max(in.Uncached, 0)), true
}

// sloBacklogCharge reports whether the backlog charge counts: only where the local
// path's predicted ITL meets slo_itl_ms. The charge weighs the requests a prompt holds
// up in a backlogged queue against what a local prefill costs the decode worker, and
// it grows with the prompt, so under a backlog it moves the longest prompts local. Where
// the decode worker's steps are already too full for this request's own ITL to meet the
// SLO, every local prefill there lengthens the steps of all the requests it decodes,
// which the running requests' ITL charge (a linear fit: 0.3 ms for the median local
// prompt there) does not see: on the Mooncake conversation trace at 4 GPUs,
// 2P2D ×1, 1000/25, the charge took 44M prompt tokens onto the two decode workers and
// their ITL to p50 25.4 ms, past the SLO; bound by local's ITL alone, 34M and 20.8 ms
// (docs/slo-policy.md, "At the user's SLO"). There the prompt is judged as below the
// backlog's charge.
//
// Where the charge does not count and both paths miss, the test of the miss factor
// does not choose either: local's miss is its ITL, which a full decode worker's steps
// set for a short prompt as for a long one (28–64 ms against 25 for prompts of under
// 2,048 uncached tokens at synthetic 1P7D ×2, 1000/25), remote's the backlog, and the
// request misses on both. What it costs the others does: local is taken iff its
// charges less remote's delay charge stay below SLOMissChargeLimit, so a short prompt
// leaves the queue, and a long one, which holds the decode worker, joins it.
func sloBacklogCharge(cfg *DisaggConfig, s *SLOPrediction) bool { return s.LocalITLMs <= cfg.SLOITLMs }

// withinITLSpan reports whether the prompt's own prefill, its uncached tokens at the
// remote TTFT fit's prefill time per token (prefillMsPerToken, when positive), takes at
// most slo_itl_ms: then the running requests' ITL charge does not count for it (decider
// version 14).
//
// Such a prefill lengthens the decode worker's steps by at most one inter-token
// interval of the SLO in all, one token's wait for each running request over its whole
// output, however many steps its chunks share. The charge reads the remote ITL fit's
// linear term of the prompt tokens queued on the decode worker, learnt where long local
// prefills fill step after step, and extrapolates it to any prompt: on the Mooncake
// synthetic trace at 1P15D ×2, 500/20, 0.15 ms of mean ITL per queued token, so that the
// short prompts it sent remote (a median of 458 uncached tokens among those that met
// the SLO prefilled on their decode worker under always-local) moved a running
// request's predicted ITL from 8.7 to 71 ms (medians), and went to a prefill queue of
// seconds; without the charge for them the cell went from 64.8 to 66.0 against
// always-local's 66.2 (docs/slo-policy.md, "Beyond the grid"). A longer prompt, or a fit
// that gives prefill no time, is charged as before. The ITL guard still reads the same
// prediction.
func withinITLSpan(cfg *DisaggConfig, fit *LatencyFit, eff int64) bool {
	perToken := prefillMsPerToken(fit)
	return perToken > 0 && perToken*float64(max(eff, 0)) <= cfg.SLOITLMs
}

// residentShare is the share of the decode worker's active decode blocks that its own
// load sample shows in use, in [0, 1] (1 without a sample or without active blocks).
// The router counts a request on its decode worker from its decision on, so behind a
// backlogged prefill worker most of the requests it counts there are waiting for
// their prefill, not decoding: their KV is not on the worker yet, and a local prefill
// does not slow their tokens. On the Mooncake synthetic trace at 1P7D ×2, 1000/25,
// the decode workers' load samples showed 0 to 4,177 blocks in use where the router's
// potential decode blocks came to 62k–114k (of 27,157), and the running requests' ITL
// charge of one long local prefill came to as much as 14 requests of goodput.
func residentShare(d *Candidate) float64 {
	if !d.LoadKnown || d.ActiveDecodeBlocks <= 0 {
		return 1
	}
	return min(max(float64(d.LoadKVUsedBlocks)/float64(d.ActiveDecodeBlocks), 0), 1)
}

// backlogMsPerToken is the time a prefill worker takes per queued prompt token: the
// larger of the remote TTFT fit's coefficients of uncached and of queued tokens,
// floored at 0. Either one alone can fall to 0 in a backlog, where the queue (and the
// decode counts that grow with it) explain the TTFT better than the prompt does.
func backlogMsPerToken(fit *LatencyFit) float64 {
	c := &fit.Coef[PathRemote][TargetTTFT]
	return max(c[1], c[3], 0)
}

// sloQueueCap returns the prefill time of the prompt tokens queued on the decode worker
// and this prompt's, and whether it vetoes a local prefill: it does past
// SLOQueueCapFraction of slo_ttft_ms, in a fleet whose local path took fewer than
// SLOQueueCapLocalShare of the window's TTFT samples.
//
// Where nearly every request prefills remotely, a decode worker's steps are the remote
// path's admission: prefill chunks fill their token budget, so the KV of a remote
// request that lands there waits until the local prefills queued ahead are done. The
// delay charges price one prompt at the margin, and at the margin the prompts of a
// burst each look cheap (the requests behind a long queue miss already), while the
// burst together jams the worker: on the Mooncake conversation trace at 6P2D ×1.5,
// nine prompts of 4k–14k uncached tokens arriving within a second went local, and 47
// of the next 104 requests met the SLO, against 78 without them. The cap bounds the
// queue. Where local prefills are common (prefill workers are the scarce ones), a long
// local queue is the local path's own wait, which the model predicts from its
// outcomes, and a cap collapses the fleet: at 2P6D ×1.5 44% of the local prefills
// join a queue of more than a second (docs/slo-policy.md).
func sloQueueCap(cfg *DisaggConfig, fit *LatencyFit, d *Candidate, eff int64) (queueMs float64, capped bool) {
	// Summed as floats: the queued tokens come from the log, and an int64 sum could wrap.
	queueMs = prefillMsPerToken(fit) * (float64(max(d.ActivePrefillTokens, 0)) + float64(max(eff, 0)))
	local, remote := fit.Samples[PathLocal][TargetTTFT], fit.Samples[PathRemote][TargetTTFT]
	rare := float64(local) < SLOQueueCapLocalShare*float64(local+remote)
	return queueMs, rare && queueMs > SLOQueueCapFraction*cfg.SLOTTFTMs
}

// delayCharge is the goodput lost by the requests arriving at a worker that took
// recent requests in the last RecentLocalWindow, over busyMs, each delayed by delayMs.
// It is never negative, whatever a recorded row or fit holds: a charge can only make a
// path worse.
func (dc *Decider) delayCharge(fit *LatencyFit, recent int64, busyMs, delayMs float64) float64 {
	arrivals := float64(max(recent, 0)) * max(busyMs, 0) / float64(RecentLocalWindow.Milliseconds())
	return arrivals * dc.typicalDelayLoss(fit, delayMs)
}

// typicalDelayLoss is the goodput one typical request loses when delayed by delayMs:
// P(typical meets) − P(typical + delay meets), at the TTFT SLO, the remote TTFT
// residual and the remote path's mean TTFT, floored at 0.
func (dc *Decider) typicalDelayLoss(fit *LatencyFit, delayMs float64) float64 {
	typical, sigma, limit := fit.Mean[PathRemote][TargetTTFT], fit.Sigma[PathRemote][TargetTTFT], dc.cfg.Disagg.SLOTTFTMs
	return max(meetProbability(typical, sigma, limit)-meetProbability(typical+delayMs, sigma, limit), 0)
}

// sloResidenceCharge is what a local prefill costs the requests a sole decode worker
// admits after it (decider version 15), in place of the next requests' charge:
//
//	charge = running × resident share × typicalDelayLoss(prefill time)
//
// with the prompt's own prefill time at backlogMsPerToken. Every request of such a
// fleet decodes on that worker, and a request whose prefill is done waits there for KV
// room: for the blocks of the requests ahead of it to be freed. A local prefill
// lengthens the steps of every request decoding there, so each holds its KV longer, by
// about the prefill's time, and the requests admitted over the next residence (about
// as many as run there, by Little's law, as for the next requests' charge) are admitted
// that much later. The running requests are counted by the share of the router's
// decode blocks that the load sample shows in use (residentShare): the others wait for
// their prefill and hold no KV there yet. The next requests' charge reads the same
// requests through the remote TTFT fit, which learns the decode worker's state as
// request and block counts, and sees nothing of a wait for KV room where the mean ITL
// is far under the SLO: on the Mooncake conversation trace at 3P1D ×0.75 at 4 GPUs,
// 2000/50, with the arrivals of each tick spread, the requests both slo (version 14)
// and isl_bounding sent remote waited 1,817 ms (median) for KV room after their prefill
// against 28, behind the slo policy's long local prefills. Charged in place of the next
// requests' charge (both would count the same requests twice), with the cold start's
// rule of sloColdSoleISL, the cell went from 62.8% to 64.1% against isl_bounding's
// 64.0%, and with its arrivals spread from a mean of 70.0% to 71.6% against 71.8%
// (docs/slo-policy.md, "Beyond the grid").
func (dc *Decider) sloResidenceCharge(fit *LatencyFit, dst *Decision, d *Candidate) float64 {
	prefillMs := backlogMsPerToken(fit) * float64(max(dst.EffectiveISL, 0))
	running := float64(max(d.ActiveRequests, 0)) * residentShare(d)
	return running * dc.typicalDelayLoss(fit, prefillMs)
}

// sloPrefillGuard reports whether every eligible prefill worker is busy past
// SLOPrefillGuardBusy (its own load sample's queued prompt tokens) while the decode
// worker is known not to be busy: then the request prefills locally whatever the
// model predicts. The model is linear and learns from the last window of outcomes, so
// a prefill queue growing past what that window saw is predicted too short, and
// remote prefills keep joining it: on the Mooncake synthetic trace at 2P6D ×1.5 the
// queues reached minutes and goodput fell to 67.8% against isl_or_load's 84.2%. The
// queue itself bounds that. It waits for every prefill worker, because one with room
// is where the request goes (the model picks it), and for the decode guard, because a
// decode worker that is itself busy must not take the prompt. The check of the picked
// row is left in dst.PrefillBusy.
func sloPrefillGuard(dc *Decider, dst *Decision, d, best *Candidate) bool {
	thr := SLOPrefillGuardBusy
	all := true
	for i := range dst.Candidates {
		row := &dst.Candidates[i]
		if row.Pool == PoolPrefill && row.Eligible && row != best && !prefillBusy(dst, row, thr) {
			all = false
			break
		}
	}
	if !prefillBusy(dst, best, thr) || !all {
		return false
	}
	cfg := dc.cfg.Disagg // a copy: the fallback guard threshold must not leak
	if !cfg.DecodeBusyThreshold.Set {
		cfg.DecodeBusyThreshold = Some(SLOFallbackDecodeBusy)
	}
	known, busy := decodeBusy(dst, d, &cfg)
	return known && !busy
}

// sloMeet is the expected probability that a request predicted at ttft and itl meets
// both SLOs, under the path's residual spread.
func (dc *Decider) sloMeet(fit *LatencyFit, path LatencyPath, ttft, itl float64) float64 {
	cfg := &dc.cfg.Disagg
	return meetProbability(ttft, fit.Sigma[path][TargetTTFT], cfg.SLOTTFTMs) *
		meetProbability(itl, fit.Sigma[path][TargetITL], cfg.SLOITLMs)
}

// sloColdStart is isl_or_load with the decode guard, under the slo policy's own reason
// codes, with the fallback thresholds when the config leaves them unset (the prefill
// busy one higher in a fleet of one decode worker, SLOFallbackPrefillBusySoleDecode).
func sloColdStart(dc *Decider, dst *Decision, d, p *Candidate) *Candidate {
	cfg := dc.cfg.Disagg // a copy: the fallback guard threshold must not leak
	thr := dc.prefillThreshold
	sole := soleDecodeWorker(dst)
	if _, ok := dc.cfg.PrefillBusyThreshold(); !ok {
		thr = SLOFallbackPrefillBusy
		if dc.coldSoleBusy && sole {
			thr = SLOFallbackPrefillBusySoleDecode
		}
	}
	if !cfg.DecodeBusyThreshold.Set {
		cfg.DecodeBusyThreshold = Some(SLOFallbackDecodeBusy)
	}
	res := islOrLoadRule(dst, &cfg, p, thr)
	dst.PolicyBypass = res.bypass
	known, busy := decodeBusy(dst, d, &cfg)
	// The ISL condition allowed the bypass (the prefill-busy one is named only alone).
	islBypass := res.bypass && res.decider != &dst.PrefillBusy
	if dc.coldSoleDecode && busy && islBypass &&
		cfg.DecodeBusySource == BusySourceRouter && (sole || dc.coldBacklogSample && sloDeepBacklog(p)) {
		known, busy = sloColdSampleGuard(dst, d, &cfg)
	}
	decider := res.decider
	switch {
	case !res.bypass:
		dst.Mode, dst.Reason = ModeRemote, ReasonSLOColdRemote
	case (!known || busy) && islBypass && dc.sloColdSoleISL(dst):
		// The guard would deny; at a sole decode worker it spares the prompt, and the
		// ISL check decides.
		dst.Mode, dst.Reason = ModeLocal, ReasonSLOColdLocal
	case !known || busy:
		dst.Mode, dst.Reason, decider = ModeRemote, ReasonSLOColdRemote, &dst.DecodeBusy
	default:
		dst.Mode, dst.Reason, decider = ModeLocal, ReasonSLOColdLocal, &dst.DecodeBusy
	}
	if res.emptyPrompt && decider != &dst.DecodeBusy {
		dst.DecidedBy = CheckEmptyPrompt
		return p
	}
	dst.DecidedBy = decider.Name
	if decider.Known {
		dst.Distance = decider.Value - decider.Limit
	}
	return p
}

// sloColdSoleISL reports whether the cold start's decode guard spares a prompt the ISL
// condition keeps local (decider version 15): in a fleet of one decode worker, whatever
// the guard reads (the router's count, the load sample, or none, and whatever
// decode_busy_source says), such a prompt is prefilled locally, decided by the ISL
// check. The guard still applies to a prompt that only the prefill-busy condition would
// keep local.
//
// The guard keeps a prompt's prefill off a decode worker whose KV is full, so that it
// goes to a prefill worker instead. At the one decode worker of a fleet that buys
// nothing for the KV: every request of the fleet decodes there, and the prompt's KV
// lands on it on either path, after a prefill queue and a transfer on the remote one.
// What the paths differ in is the prefill's compute, and a prompt the ISL condition
// keeps local (under eff_isl_threshold uncached tokens, mostly cached) is a fraction of
// one step there. On the Mooncake synthetic trace at 7P1D ×2.5, 1000/25, the cold start
// decides 91% of the run, and the load sample shows the worker's KV more than half full
// at 60% of its decisions: the guard sent 40 to 51 such prompts of a run remote (medians
// of 271 to 294 uncached tokens), to a TTFT of 0.9 to 1.3 s (medians) against 38 to 43
// ms under isl_bounding, which keeps them local. Sparing them took the cell from 43.2%
// to 46.7% against isl_bounding's 43.6%, and with its arrivals spread from 41.3 and
// 39.8% to 47.2 and 46.6% against 43.6 and 43.5% (docs/slo-policy.md, "Beyond the
// grid"). A longer prompt the prefill-busy condition would keep local fills the steps of
// every running request there, and the guard stays for it.
func (dc *Decider) sloColdSoleISL(dst *Decision) bool {
	return dc.coldSoleISL && soleDecodeWorker(dst)
}

// sloColdSampleGuard re-reads the cold start's decode guard from the decode worker's own
// load sample, for a prompt the ISL condition sends local that the router's count
// denied, in a fleet of one decode worker (soleDecodeWorker). It keeps the router's
// check, and its verdict, unless the sample is known and shows room.
//
// The router counts a request on its decode worker from its decision on, so the one
// decode worker of a fleet holds in its count every request in flight, those still
// waiting for a remote prefill included: its count tracks the prefill workers' queues,
// not its KV. There the cold start decides most of a run (at synthetic 7P1D ×1.5,
// 1000/25, the model is warm for 381 of 3,983 decisions, because the local path
// gathers its samples slowly where local prefills are rare), and at the router's count
// it sent 62 of its 111 cheap prompts remote, which isl_bounding keeps local. The local
// prefills it lets through are also the local path's samples, so the model warms
// sooner: at 7P1D ×2 the warm policy decided 830 requests against 28. Where decode
// workers are several, the same reading warms the model sooner too, and there it cost:
// at the default SLO, conversation 6P2D ×1.5 warmed after 777 decisions instead of
// 3,098, the warm policy then prefilled 967 requests locally against 152, and goodput
// fell from 86.9% to 84.0% (docs/slo-policy.md, "At the user's SLO").
func sloColdSampleGuard(dst *Decision, d *Candidate, cfg *DisaggConfig) (known, busy bool) {
	router := dst.DecodeBusy
	sample := *cfg // a copy: the source must not leak
	sample.DecodeBusySource = BusySourceWorker
	if known, busy = decodeBusy(dst, d, &sample); known && !busy {
		return known, busy
	}
	dst.DecodeBusy = router
	return router.Known, router.Hit
}

// sloDeepBacklog reports whether prefill worker p's own load sample queues more than
// SLOPrefillGuardBusy × its max_num_batched_tokens (an unknown one taken as
// UnknownMaxNumBatchedTokens): the cold start then reads its decode guard at the decode
// worker's load sample in a fleet of several decode workers too (decider version 10).
//
// The router counts a request on its decode worker from its decision on, so behind a
// queue that deep every decode worker's count holds the requests waiting in it, and the
// guard, at the router's count, sends the next prompt the ISL condition would keep local
// into the queue as well: the local path gathers no samples, the model never warms, and
// the queue only grows. On the Mooncake conversation trace at 2P2D ×1.5, 1000/25, the
// cold start decided all 12,031 requests, 29 of them local, behind queues of up to 24.3M
// prompt tokens, and kept 0.1% against isl_bounding's 20.5% (docs/slo-policy.md, "Beyond
// the grid"). Below that depth the router's count stands: read at the sample wherever
// the decode workers are several, the guard warmed the model sooner and cost
// conversation 6P2D ×1.5 at the default SLO 2.9 pp (version 7).
func sloDeepBacklog(p *Candidate) bool {
	mnbt := p.MaxNumBatchedTokens
	if mnbt <= 0 {
		mnbt = UnknownMaxNumBatchedTokens
	}
	return p.LoadKnown && float64(p.LoadPrefillTokens) > SLOPrefillGuardBusy*float64(mnbt)
}

// sloBacklogPick reports whether the slo policy's pick of a decode worker reads the
// decode workers' active decode blocks at their load samples (decider version 13):
// every eligible prefill worker of refs (there is at least one) has a load sample
// queued past SLOPrefillGuardBusy × its max_num_batched_tokens (an unknown one taken as
// UnknownMaxNumBatchedTokens), as sloDeepBacklog reads it.
//
// The router counts a request's blocks on its decode worker from the decision on, and a
// request waiting in a prefill queue holds none there yet. Behind a queue that deep
// such requests make much of every decode worker's count, for the seconds they wait,
// and the cost's decode term, counting them block for block against the prefix a
// worker holds, sends a prompt whose prefix is cached on one worker to another to
// prefill it all again. On the synthetic trace at 1P7D ×2.5, 1000/25, read at
// the samples the cell went from 19.6 to 36.7 against isl_or_load's 24.2; read there
// whatever the queues, 7 cells of the tight-SLO grid fell below the bar (conversation
// 2P6D ×1.5 at 8 GPUs from 67.9 to 58.0), the samples lagging the decisions that just
// went to a worker (docs/slo-policy.md, "Beyond the grid").
func (dc *Decider) sloBacklogPick(v View, workers []WorkerInfo, refs []int32) bool {
	if !dc.backlogPick {
		return false
	}
	n := 0
	for _, ref := range refs {
		w := &workers[ref]
		if exclusion(w) != "" {
			continue
		}
		ls, ok := v.Load(int(ref))
		if !ok {
			return false
		}
		row := Candidate{LoadKnown: true, LoadPrefillTokens: ls.ActivePrefillTokens, MaxNumBatchedTokens: w.MaxNumBatchedTokens}
		if !sloDeepBacklog(&row) {
			return false
		}
		n++
	}
	return n > 0
}

// soleDecodeWorker reports whether the fleet has exactly one decode worker of the
// request's model: one candidate row of the decode pool, eligible or not.
func soleDecodeWorker(dst *Decision) bool {
	n := 0
	for i := range dst.Candidates {
		if dst.Candidates[i].Pool == PoolDecode {
			n++
		}
	}
	return n == 1
}

func minSamples(f *LatencyFit) int64 {
	m := f.Samples[0][0]
	for p := range f.Samples {
		for t := range f.Samples[p] {
			m = min(m, f.Samples[p][t])
		}
	}
	return m
}
