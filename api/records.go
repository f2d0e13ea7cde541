package api

import (
	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/replay"
)

func refString(r *pb.WorkerRef) string {
	if r == nil {
		return ""
	}
	return events.WorkerRank(r.GetWorkerId(), r.GetDpRank())
}

// decisionRecord copies a decision (whose memory the decider reuses) into a
// self-contained record, through the one mapping replay also reads back.
// The hash chains are the request's own, shared: neither is modified
// afterwards. A table of more than maxCandidates rows keeps the rows
// decider.KeepRows chooses, and counts the others.
func decisionRecord(d *decider.Decision, req *decider.Request, maxCandidates int) *pb.DecisionRecord {
	orig := &pb.DecisionRecord{DeciderVersion: replay.DeciderVersion, Chains: make([]*pb.HashChain, len(req.Chains))}
	for i, ch := range req.Chains {
		orig.Chains[i] = &pb.HashChain{BlockSize: uint32(ch.BlockSize), BlockHashes: ch.Hashes}
	}
	keep := decider.KeepRows(d.Candidates, maxCandidates, nil)
	if keep == nil {
		return replay.RecordOf(d, orig)
	}
	kept := *d // shares d's memory; RecordOf only reads it
	kept.Candidates = make([]decider.Candidate, len(keep))
	omitted := &pb.OmittedCandidates{}
	next := 0
	for i := range d.Candidates {
		if next < len(keep) && keep[next] == i {
			kept.Candidates[next] = d.Candidates[i]
			next++
			continue
		}
		if d.Candidates[i].Pool == decider.PoolDecode {
			omitted.Decode++
		} else {
			omitted.Prefill++
		}
		if d.Candidates[i].Eligible {
			omitted.Eligible++
		}
	}
	orig.OmittedCandidates = omitted
	return replay.RecordOf(&kept, orig)
}

// routeResponse is the 200 body of POST /v1/route.
type routeResponse struct {
	RequestID         string                      `json:"request_id"`
	DecisionID        string                      `json:"decision_id"`
	Mode              string                      `json:"mode"`
	DecodeWorker      string                      `json:"decode_worker"`
	PrefillWorker     *string                     `json:"prefill_worker"`
	Reason            string                      `json:"reason"`
	Policy            string                      `json:"policy"`
	PromptTokens      uint32                      `json:"prompt_tokens"`
	CachedTokens      uint32                      `json:"cached_tokens"`
	EffectiveISL      uint32                      `json:"effective_isl"`
	EffectiveISLRatio float64                     `json:"effective_isl_ratio"`
	ConfigHash        string                      `json:"config_hash"`
	Watermark         map[string]map[string]int64 `json:"watermark"`
	DecidedBy         string                      `json:"decided_by"`
	Distance          float64                     `json:"distance"`
	Idempotent        bool                        `json:"idempotent_replay,omitempty"`
	Candidates        []candidateJSON             `json:"candidates,omitempty"`
}

type candidateJSON struct {
	Worker                string  `json:"worker"`
	Pool                  string  `json:"pool"`
	Eligible              bool    `json:"eligible"`
	Excluded              string  `json:"excluded,omitempty"`
	BlockSize             uint32  `json:"block_size"`
	OverlapBlocks         uint32  `json:"overlap_blocks"`
	HostBlocks            uint32  `json:"host_blocks"`
	DiskBlocks            uint32  `json:"disk_blocks"`
	ActivePrefillTokens   int64   `json:"active_prefill_tokens"`
	RawPrefillBlocks      float64 `json:"raw_prefill_blocks"`
	OverlapCredit         float64 `json:"overlap_credit"`
	PrefillTerm           float64 `json:"prefill_term"`
	ActiveDecodeBlocks    int64   `json:"active_decode_blocks"`
	RequestBlocks         int64   `json:"request_blocks"`
	SharedActiveBlocks    int64   `json:"shared_active_blocks"`
	PotentialDecodeBlocks int64   `json:"potential_decode_blocks"`
	Cost                  float64 `json:"cost"`
	Probability           float64 `json:"probability"`
	TotalKVBlocks         int64   `json:"total_kv_blocks"`
	MaxNumBatchedTokens   int64   `json:"max_num_batched_tokens"`
	LoadKnown             bool    `json:"load_known"`
	LoadKVUsedBlocks      int64   `json:"load_kv_used_blocks"`
	Picked                bool    `json:"picked"`
}

func poolName(p pb.Pool) string {
	switch p {
	case pb.Pool_POOL_DECODE:
		return "decode"
	case pb.Pool_POOL_PREFILL:
		return "prefill"
	}
	return "unspecified"
}

// responseOf is rec's route response, without its Watermark: writeRoute
// renders the record's watermark (cached per watermark), and fills
// Watermark only when it falls back to encoding/json.
func responseOf(rec *pb.DecisionRecord, explain bool) routeResponse {
	r := routeResponse{
		RequestID: rec.GetRequestId(), DecisionID: rec.GetDecisionId(), Mode: rec.GetMode(),
		DecodeWorker: refString(rec.GetDecodeWorker()), Reason: rec.GetReason(), Policy: rec.GetPolicy(),
		PromptTokens: rec.GetPromptTokens(), CachedTokens: rec.GetCachedTokens(), EffectiveISL: rec.GetEffectiveIsl(),
		EffectiveISLRatio: rec.GetEffectiveIslRatio(), ConfigHash: rec.GetConfigHash(),
		DecidedBy: rec.GetDecidedBy(), Distance: rec.GetDistance(),
	}
	if rec.GetMode() == string(decider.ModeRemote) && rec.GetPrefillWorker() != nil {
		p := refString(rec.GetPrefillWorker())
		r.PrefillWorker = &p
	}
	if explain {
		r.Candidates = make([]candidateJSON, len(rec.GetCandidates()))
		for i, c := range rec.GetCandidates() {
			r.Candidates[i] = candidateJSON{
				Worker: refString(c.GetWorker()), Pool: poolName(c.GetPool()), Eligible: c.GetEligible(), Excluded: c.GetExcluded(),
				BlockSize: c.GetBlockSize(), OverlapBlocks: c.GetOverlapBlocks(), HostBlocks: c.GetHostBlocks(), DiskBlocks: c.GetDiskBlocks(),
				ActivePrefillTokens: c.GetActivePrefillTokens(), RawPrefillBlocks: c.GetRawPrefillBlocks(), OverlapCredit: c.GetOverlapCredit(),
				PrefillTerm: c.GetPrefillTerm(), ActiveDecodeBlocks: c.GetActiveDecodeBlocks(), RequestBlocks: c.GetRequestBlocks(),
				SharedActiveBlocks: c.GetSharedActiveBlocks(), PotentialDecodeBlocks: c.GetPotentialDecodeBlocks(), Cost: c.GetCost(),
				Probability: c.GetProbability(), TotalKVBlocks: c.GetTotalKvBlocks(), MaxNumBatchedTokens: c.GetMaxNumBatchedTokens(),
				LoadKnown: c.GetLoadKnown(), LoadKVUsedBlocks: c.GetLoadKvUsedBlocks(), Picked: c.GetPicked(),
			}
		}
	}
	return r
}
