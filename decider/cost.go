package decider

// Tier credits for blocks that must be brought back from a lower cache tier. The device
// tier is credited overlap_score_credit (configurable); host and disk are fixed by the
// spec.
const (
	hostCredit = 0.75
	diskCredit = 0.25
)

// costInputs are the numbers one worker's cost is made of.
type costInputs struct {
	prompt        int64 // P
	blockSize     int   // B
	overlap       TierOverlap
	active        ActiveLoad
	sharedActive  int64 // request blocks already active on the worker
	decode        bool  // decode pool: add the potential decode blocks term
	overlapCredit float64
	prefillScale  float64
	// tokenCost: the cost is in tokens (Version 2 on); false only to recompute
	// decisions of Version 1, whose cost was in blocks.
	tokenCost bool
	// residentCap, when ≥ 0, caps the active decode blocks the decode term counts: the
	// KV blocks the worker's own load sample shows in use (the slo policy behind a deep
	// prefill backlog from decider version 13, sloBacklogPick). −1: no cap.
	residentCap int64
}

// scoreRow fills the cost terms of an eligible row (conditional-disagg.md, Step 1):
//
//	raw_prefill_blocks = (active_prefill_tokens + P) / B
//	overlap_credit     = overlap_score_credit·overlap + 0.75·host + 0.25·disk
//	prefill_term       = prefill_load_scale · max(0, raw_prefill_blocks − overlap_credit)
//	cost               = B · (prefill_term + potential_decode_blocks)   (decode pool)
//	cost               = B · prefill_term                               (prefill pool)
//
// Under the slo policy from decider version 13, behind a deep prefill backlog, the
// decode term counts the active decode blocks at most at the worker's own load sample
// (residentCap, sloBacklogPick); potential_decode_blocks, which the guards and the
// latency model read, is unchanged.
//
// The terms are in the worker's own blocks, as Dynamo states them; the cost is in
// tokens, because a block of one worker is not a block of another: SGLang's page size
// is 1 and vLLM's block size 16, and in blocks a worker holding a whole 100-token prompt
// in 1-token pages would cost more than an empty 16-token one. With one block size in
// the fleet the token cost is the block cost times the same B, so it orders workers and
// normalizes for softmax as the block cost does (exactly when B is a power of two, as
// every engine's default is: the product is then exact).
//
// A prefill worker's cost has no decode term: it never holds the request while it
// decodes. Each term is computed in one fixed order of float operations, so a row's cost
// depends only on its own inputs and never on the order of the other rows.
func scoreRow(row *Candidate, in *costInputs) {
	row.OverlapBlocks = in.overlap.Device
	row.HostBlocks = in.overlap.Host
	row.DiskBlocks = in.overlap.Disk
	row.ActivePrefillTokens = in.active.PrefillTokens
	row.RawPrefillBlocks = float64(in.active.PrefillTokens+in.prompt) / float64(in.blockSize)
	row.OverlapCredit = in.overlapCredit*float64(in.overlap.Device) +
		hostCredit*float64(in.overlap.Host) + diskCredit*float64(in.overlap.Disk)
	row.PrefillTerm = in.prefillScale * max(0, row.RawPrefillBlocks-row.OverlapCredit)
	blocks := row.PrefillTerm
	row.RecentRequests = in.active.RecentRequests
	if in.decode {
		row.ActiveDecodeBlocks = in.active.DecodeBlocks
		row.ActiveRequests = in.active.Requests
		row.RecentLocalPrefill = in.active.RecentLocalPrefill
		row.RequestBlocks = ceilDiv(in.prompt, int64(in.blockSize))
		row.SharedActiveBlocks = in.sharedActive
		row.PotentialDecodeBlocks = in.active.DecodeBlocks + row.RequestBlocks - in.sharedActive
		if in.residentCap >= 0 && in.residentCap < in.active.DecodeBlocks {
			blocks += float64(in.residentCap + row.RequestBlocks - in.sharedActive)
		} else {
			blocks += float64(row.PotentialDecodeBlocks)
		}
	}
	row.Cost = blocks
	if in.tokenCost {
		row.Cost = float64(in.blockSize) * blocks
	}
}

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0: a request occupies a KV block for its trailing
// partial block too.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
