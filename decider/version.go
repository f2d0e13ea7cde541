package decider

import "fmt"

// Version is the decider version this build decides with, recorded in every decision
// (decider_version) so that a recompute can tell "other semantics" from "a fault".
// It changes whenever the same (config, request, view) can give another decision.
//
//   - 1: the Step 1 cost in blocks of each worker's own block size.
//   - 2: the Step 1 cost in tokens (block cost × B), so that workers of different block
//     sizes compare (cost.go). Same decisions as 1 in a fleet of one power-of-two block
//     size; the recorded costs are B times larger.
//   - 3: the slo policy charges each path the goodput its prefill is expected to cost
//     the requests that queue behind it (policy_slo.go, delay charges). Other
//     policies decide as in 2.
//   - 4: the slo policy caps a decode worker's local prefill queue in a fleet that
//     prefills remotely nearly always (policy_slo.go, sloQueueCap). Other policies
//     decide as in 2.
//   - 5: the slo policy judges a backlogged prefill worker by the prefill time of its
//     queue and charges a remote prefill there the requests it holds up
//     (policy_slo.go, sloBacklog). Other policies decide as in 2.
//   - 6: the slo policy charges remote a backlog only where the local path's predicted
//     ITL meets slo_itl_ms, and where it does not and both paths miss, decides by the
//     charges alone (policy_slo.go, sloBacklogCharge). Other policies decide as in 2.
//   - 7: the slo policy's cold start, in a fleet of one decode worker, lets a prompt the
//     ISL condition sends local through the decode guard when the worker's own load
//     sample shows room (policy_slo.go, sloColdSampleGuard). Other policies decide as
//     in 2.
//   - 8: the slo policy's cold start, in a fleet of one decode worker and with
//     prefill_busy_threshold unset, sees a prefill worker as busy past 3 × its
//     max_num_batched_tokens, not 2 (policy_slo.go, SLOFallbackPrefillBusySoleDecode).
//     Other policies decide as in 2.
//   - 9: the slo policy's ITL guard does not veto a local prefill behind a backlogged
//     prefill worker in a fleet of several decode workers (policy_slo.go,
//     sloITLGuardStandsAside). Other policies decide as in 2.
//   - 10: the slo policy's cold start, in a fleet of several decode workers, reads the
//     decode guard at the decode worker's load sample (as 7 does at a sole decode
//     worker) behind a prefill worker queued past SLOPrefillGuardBusy × its
//     max_num_batched_tokens (policy_slo.go, sloDeepBacklog). Other policies decide as
//     in 2.
//   - 11: the slo policy, when both paths are predicted to miss and remote's predicted
//     TTFT is past SLOTriageFactor × slo_ttft_ms, sends remote a prompt the ISL
//     condition would not keep local (policy_slo.go, sloTriage). Other policies decide
//     as in 2.
//   - 12: the slo policy, in a fleet of one decode worker, lets the ISL condition decide
//     where the goodput does not: when both paths are predicted to miss, and when the
//     margin is within SLOTieMargin (policy_slo.go, sloSoleDecodeISL). Other policies
//     decide as in 2.
//   - 13: the slo policy's pick of a decode worker, while every eligible prefill worker's
//     load sample queues past SLOPrefillGuardBusy × its max_num_batched_tokens, counts a
//     worker's active decode blocks at most at the KV blocks its own load sample shows
//     in use (cost.go, policy_slo.go, sloBacklogPick). Other policies decide as in 2.
//   - 14: the slo policy does not charge a local prefill the running requests' ITL when
//     the prompt's own prefill time, at the remote TTFT fit's time per uncached token,
//     is at most slo_itl_ms (policy_slo.go, withinITLSpan); and where the charges alone
//     decide a both-miss behind a backlog (version 6), it takes local only below
//     SLOBacklogMissChargeLimit, a quarter of a request, not SLOMissChargeLimit's half.
//     Other policies decide as in 2.
//   - 15: the slo policy, in a fleet of one decode worker, lets its cold start prefill a
//     prompt the ISL condition keeps local whatever the decode guard reads
//     (policy_slo.go, sloColdSoleISL), and charges a local prefill the running requests'
//     residence (their KV held longer by its prefill time, counted by the resident
//     share) in place of the next requests' charge (policy_slo.go, sloResidenceCharge).
//     Other policies decide as in 2.
const Version uint32 = 15

// SupportsVersion reports whether NewAt can decide with version v's semantics.
func SupportsVersion(v uint32) bool { return v >= 1 && v <= Version }

// NewAt is New for a past decider version, so that a decision recorded by an older
// build recomputes with the semantics it was made with and stays explainable. Live
// routing uses New, which is NewAt(cfg, Version).
func NewAt(cfg Config, version uint32) (*Decider, error) {
	if !SupportsVersion(version) {
		return nil, fmt.Errorf("decider: version %d is not one this build can decide with (1 to %d)", version, Version)
	}
	dc, err := New(cfg)
	if err != nil {
		return nil, err
	}
	dc.setVersion(version)
	return dc, nil
}

// setVersion sets the semantics of a decider version: the one place that maps a
// version to what changed in it, so that New (the current version) and NewAt agree.
func (dc *Decider) setVersion(version uint32) {
	dc.tokenCost = version >= 2
	dc.delayCharges = version >= 3
	dc.queueCap = version >= 4
	dc.backlog = version >= 5
	dc.itlBoundCharge = version >= 6
	dc.coldSoleDecode = version >= 7
	dc.coldSoleBusy = version >= 8
	dc.backlogITLGuard = version >= 9
	dc.coldBacklogSample = version >= 10
	dc.triage = version >= 11
	dc.soleDecodeISL = version >= 12
	dc.backlogPick = version >= 13 && dc.cfg.Disagg.Policy == PolicySLO
	dc.itlSpanPrompt = version >= 14
	dc.backlogMissLimit = version >= 14
	dc.coldSoleISL = version >= 15
	dc.soleResidence = version >= 15
}
