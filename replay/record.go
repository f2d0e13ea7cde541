package replay

import (
	"slices"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// DeciderVersion is the decider_version this build's decider writes (the
// api package records it). A record of an earlier version is recomputed
// with that version's semantics (deciderFor); one of a version this build
// does not know was decided by other semantics, so a difference on
// recompute is expected there and is reported as such, not as a fault.
const DeciderVersion = decider.Version

// This file maps between the decider's types and the record, both ways, and
// is the only place that does: the API writes its records with RecordOf, so
// a recomputed decision re-encodes to the bytes that were written
// (TestRecordedDecisionsReproduceByteForByte). The reverse direction
// (record → decision) is what the comparison and the explanation read.

// workerID is the decider's worker id of a record's WorkerRef: "id" for DP
// rank 0, "id/dpN" otherwise.
func workerID(r *pb.WorkerRef) string {
	if r == nil {
		return ""
	}
	return events.WorkerRank(r.GetWorkerId(), r.GetDpRank())
}

// workerRef is the inverse of workerID.
func workerRef(id string) *pb.WorkerRef {
	if id == "" {
		return nil
	}
	w, rank, ok := events.ParseWorkerRank(id)
	if !ok {
		return &pb.WorkerRef{WorkerId: id}
	}
	return &pb.WorkerRef{WorkerId: w, DpRank: rank}
}

func poolOf(p pb.Pool) decider.Pool {
	switch p {
	case pb.Pool_POOL_DECODE:
		return decider.PoolDecode
	case pb.Pool_POOL_PREFILL:
		return decider.PoolPrefill
	}
	return ""
}

func poolPB(p decider.Pool) pb.Pool {
	switch p {
	case decider.PoolDecode:
		return pb.Pool_POOL_DECODE
	case decider.PoolPrefill:
		return pb.Pool_POOL_PREFILL
	}
	return pb.Pool_POOL_UNSPECIFIED
}

func checkOf(c *pb.Check) decider.Check {
	return decider.Check{Name: decider.CheckName(c.GetName()), Evaluated: c.GetEvaluated(), Known: c.GetKnown(),
		Value: c.GetValue(), Limit: c.GetLimit(), Hit: c.GetHit(), Note: c.GetNote()}
}

func checkPB(c *decider.Check) *pb.Check {
	return &pb.Check{Name: string(c.Name), Evaluated: c.Evaluated, Known: c.Known, Value: c.Value, Limit: c.Limit, Hit: c.Hit, Note: c.Note}
}

// candidateOf is one record row as the decider's Candidate.
func candidateOf(c *pb.Candidate) decider.Candidate {
	return decider.Candidate{
		Worker: workerID(c.GetWorker()), Pool: poolOf(c.GetPool()), Eligible: c.GetEligible(), Excluded: c.GetExcluded(),
		BlockSize: int(c.GetBlockSize()), OverlapBlocks: int(c.GetOverlapBlocks()), HostBlocks: int(c.GetHostBlocks()),
		DiskBlocks: int(c.GetDiskBlocks()), ActivePrefillTokens: c.GetActivePrefillTokens(), RawPrefillBlocks: c.GetRawPrefillBlocks(),
		OverlapCredit: c.GetOverlapCredit(), PrefillTerm: c.GetPrefillTerm(), ActiveDecodeBlocks: c.GetActiveDecodeBlocks(),
		RequestBlocks: c.GetRequestBlocks(), SharedActiveBlocks: c.GetSharedActiveBlocks(), PotentialDecodeBlocks: c.GetPotentialDecodeBlocks(),
		Cost: c.GetCost(), TieHash: decider.Hash64(c.GetTieHash()), Probability: c.GetProbability(), TotalKVBlocks: c.GetTotalKvBlocks(),
		MaxNumBatchedTokens: c.GetMaxNumBatchedTokens(), LoadKnown: c.GetLoadKnown(), LoadKVUsedBlocks: c.GetLoadKvUsedBlocks(),
		LoadPrefillTokens: c.GetLoadPrefillTokens(), Picked: c.GetPicked(), ActiveRequests: c.GetActiveRequests(),
		RecentLocalPrefill: c.GetRecentLocalPrefill(), RecentRequests: c.GetRecentRequests(),
	}
}

// fillCandidate writes row c into dst, with its worker ref in ref: a record
// has a row per worker, so RecordOf allocates the rows and refs in one block
// each.
func fillCandidate(dst *pb.Candidate, ref *pb.WorkerRef, c *decider.Candidate) {
	var w *pb.WorkerRef
	if c.Worker != "" {
		w = ref
		if id, rank, ok := events.ParseWorkerRank(c.Worker); ok {
			w.WorkerId, w.DpRank = id, rank
		} else {
			w.WorkerId = c.Worker
		}
	}
	*dst = pb.Candidate{
		Worker: w, Pool: poolPB(c.Pool), Eligible: c.Eligible, Excluded: c.Excluded,
		BlockSize: uint32(c.BlockSize), OverlapBlocks: uint32(c.OverlapBlocks), HostBlocks: uint32(c.HostBlocks),
		DiskBlocks: uint32(c.DiskBlocks), ActivePrefillTokens: c.ActivePrefillTokens, RawPrefillBlocks: c.RawPrefillBlocks,
		OverlapCredit: c.OverlapCredit, PrefillTerm: c.PrefillTerm, ActiveDecodeBlocks: c.ActiveDecodeBlocks,
		RequestBlocks: c.RequestBlocks, SharedActiveBlocks: c.SharedActiveBlocks, PotentialDecodeBlocks: c.PotentialDecodeBlocks,
		Cost: c.Cost, TieHash: uint64(c.TieHash), Probability: c.Probability, TotalKvBlocks: c.TotalKVBlocks,
		MaxNumBatchedTokens: c.MaxNumBatchedTokens, LoadKnown: c.LoadKnown, LoadKvUsedBlocks: c.LoadKVUsedBlocks,
		LoadPrefillTokens: c.LoadPrefillTokens, Picked: c.Picked, ActiveRequests: c.ActiveRequests,
		RecentLocalPrefill: c.RecentLocalPrefill, RecentRequests: c.RecentRequests,
	}
}

// DecisionOf reads the decider's output back out of a record: the decision
// as the deciding replica saw it, in the decider's own type, so that it can
// be compared with a recomputation in the decider's canonical encoding.
func DecisionOf(rec *pb.DecisionRecord) *decider.Decision {
	d := &decider.Decision{
		RequestID: rec.GetRequestId(), Model: rec.GetModel(), Mode: decider.Mode(rec.GetMode()),
		Reason: decider.Reason(rec.GetReason()), Policy: decider.Policy(rec.GetPolicy()), ConfigHash: rec.GetConfigHash(),
		DecodeWorker: workerID(rec.GetDecodeWorker()), PrefillWorker: workerID(rec.GetPrefillWorker()),
		PromptTokens: int64(rec.GetPromptTokens()), BlockSize: int(rec.GetBlockSize()), CachedTokens: int64(rec.GetCachedTokens()),
		EffectiveISL: int64(rec.GetEffectiveIsl()), Ratio: rec.GetEffectiveIslRatio(), PolicyBypass: rec.GetPolicyBypass(),
		DecidedBy: decider.CheckName(rec.GetDecidedBy()), Distance: rec.GetDistance(),
		EffISLCheck: checkOf(rec.GetEffIslCheck()), RatioCheck: checkOf(rec.GetRatioCheck()),
		PrefillBusy: checkOf(rec.GetPrefillBusyCheck()), DecodeBusy: checkOf(rec.GetDecodeBusyCheck()),
		Candidates: make([]decider.Candidate, len(rec.GetCandidates())),
		SLO:        sloOf(rec.GetSlo()),
	}
	for i, c := range rec.GetCandidates() {
		d.Candidates[i] = candidateOf(c)
	}
	return d
}

// RecordOf encodes a decision as a record: every field the decider produces
// is taken from d (copied: the decider reuses d's memory), every field the
// API adds around it (ids, times, replica, watermark, chains, config JSON,
// digest, decider version, the count of table rows left out) is kept from
// orig. The API calls it with an orig
// holding the chains and the version; explain calls it with the record a
// decision was recomputed from, and then the result must marshal to orig's
// bytes.
func RecordOf(d *decider.Decision, orig *pb.DecisionRecord) *pb.DecisionRecord {
	rec := &pb.DecisionRecord{
		DecisionId:           orig.GetDecisionId(),
		RequestId:            d.RequestID,
		RequestDigest:        orig.GetRequestDigest(),
		Model:                d.Model,
		LoraName:             orig.GetLoraName(),
		PromptTokens:         uint32(d.PromptTokens),
		ExpectedOutputTokens: orig.GetExpectedOutputTokens(),
		Mode:                 string(d.Mode),
		DecodeWorker:         workerRef(d.DecodeWorker),
		PrefillWorker:        workerRef(d.PrefillWorker),
		Reason:               string(d.Reason),
		CachedTokens:         uint32(d.CachedTokens),
		EffectiveIsl:         uint32(d.EffectiveISL),
		EffectiveIslRatio:    d.Ratio,
		Policy:               string(d.Policy),
		ConfigHash:           d.ConfigHash,
		ConfigJson:           orig.GetConfigJson(),
		Watermark:            orig.GetWatermark(),
		Chains:               orig.GetChains(),
		BlockSize:            uint32(d.BlockSize),
		PolicyBypass:         d.PolicyBypass,
		DecidedBy:            string(d.DecidedBy),
		Distance:             d.Distance,
		EffIslCheck:          checkPB(&d.EffISLCheck),
		RatioCheck:           checkPB(&d.RatioCheck),
		PrefillBusyCheck:     checkPB(&d.PrefillBusy),
		DecodeBusyCheck:      checkPB(&d.DecodeBusy),
		DecidedAtUnixNano:    orig.GetDecidedAtUnixNano(),
		ReplicaId:            orig.GetReplicaId(),
		DeciderVersion:       orig.GetDeciderVersion(),
		OmittedCandidates:    orig.GetOmittedCandidates(),
		RetryOfDecisionId:    orig.GetRetryOfDecisionId(),
		Candidates:           make([]*pb.Candidate, len(d.Candidates)),
		Slo:                  sloPB(&d.SLO),
	}
	rows := make([]pb.Candidate, len(d.Candidates))
	refs := make([]pb.WorkerRef, len(d.Candidates))
	for i := range d.Candidates {
		fillCandidate(&rows[i], &refs[i], &d.Candidates[i])
		rec.Candidates[i] = &rows[i]
	}
	return rec
}

// RequestOf is the decider request a record answered. When the record
// carries its hash chains they are used as they are. Otherwise (an export,
// which leaves chains out, or an old record) a chain of placeholder hashes
// stands in for each block size of the table. The record view answers
// overlaps from the table by worker, never from hash contents, so only a
// chain's length reaches the decider: it bounds the overlap and the shared
// active blocks, and an empty chain skips the match. The placeholder is as
// long as the longest recorded match of its block size, which therefore
// passes through unchanged, as it did from the real chain. A chain the
// record cut to a prefix (omitted_blocks) is lengthened the same way, with
// placeholders after its recorded hashes.
func RequestOf(rec *pb.DecisionRecord) *decider.Request {
	req := &decider.Request{ID: rec.GetRequestId(), Model: rec.GetModel(), PromptTokens: int64(rec.GetPromptTokens())}
	sizes, longest := longestMatches(rec)
	if len(rec.GetChains()) > 0 {
		for _, c := range rec.GetChains() {
			hashes := c.GetBlockHashes()
			if c.GetOmittedBlocks() > 0 {
				whole := int64(len(hashes)) + int64(c.GetOmittedBlocks())
				if i := slices.Index(sizes, int(c.GetBlockSize())); i >= 0 && longest[i] > int64(len(hashes)) {
					hashes = append(slices.Clip(hashes), make([]uint64, min(longest[i], whole)-int64(len(hashes)))...)
				}
			}
			req.Chains = append(req.Chains, decider.Chain{BlockSize: int(c.GetBlockSize()), Hashes: hashes})
		}
		return req
	}
	for i, bs := range sizes {
		if n := min(longest[i], req.PromptTokens/int64(bs)); n > 0 {
			req.Chains = append(req.Chains, decider.Chain{BlockSize: bs, Hashes: make([]uint64, n)})
		}
	}
	return req
}

// longestMatches lists the block sizes of rec's table and, for each, the
// longest match a row recorded: device, host and disk blocks, or shared
// active blocks.
func longestMatches(rec *pb.DecisionRecord) (sizes []int, longest []int64) {
	for _, c := range rec.GetCandidates() {
		bs := int(c.GetBlockSize())
		if bs <= 0 {
			continue
		}
		n := max(int64(c.GetOverlapBlocks())+int64(c.GetHostBlocks())+int64(c.GetDiskBlocks()), c.GetSharedActiveBlocks())
		i := slices.Index(sizes, bs)
		if i < 0 {
			sizes, longest = append(sizes, bs), append(longest, 0)
			i = len(sizes) - 1
		}
		longest[i] = max(longest[i], n)
	}
	return sizes, longest
}
