package api

import (
	"strconv"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// deciderVersion is recorded in every decision; bump it when the decider's
// semantics change, so explain knows a recomputation may legitimately differ.
const deciderVersion = 1

// workerRef splits the decider's worker id ("decode-1/dp3") into the
// record's worker and dp rank.
func workerRef(id string) *pb.WorkerRef {
	if id == "" {
		return nil
	}
	return fillWorkerRef(new(pb.WorkerRef), id)
}

// fillWorkerRef is workerRef into r (non-empty id).
func fillWorkerRef(r *pb.WorkerRef, id string) *pb.WorkerRef {
	w, rank, ok := events.ParseWorkerRank(id)
	if !ok {
		r.WorkerId = id
		return r
	}
	r.WorkerId, r.DpRank = w, rank
	return r
}

func refString(r *pb.WorkerRef) string {
	if r == nil {
		return ""
	}
	return events.WorkerRank(r.GetWorkerId(), r.GetDpRank())
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

func checkPB(c *decider.Check) *pb.Check {
	return &pb.Check{Name: string(c.Name), Evaluated: c.Evaluated, Known: c.Known, Value: c.Value, Limit: c.Limit, Hit: c.Hit, Note: c.Note}
}

// decisionRecord copies a decision (whose memory the decider reuses) into a
// self-contained record. The candidate rows and their worker refs are
// allocated in one block each (a record has a row per worker). The hash
// chains are the request's own, shared: neither is modified afterwards.
func decisionRecord(d *decider.Decision, req *decider.Request) *pb.DecisionRecord {
	rec := &pb.DecisionRecord{
		RequestId:         d.RequestID,
		Model:             d.Model,
		PromptTokens:      uint32(d.PromptTokens),
		Mode:              string(d.Mode),
		DecodeWorker:      workerRef(d.DecodeWorker),
		PrefillWorker:     workerRef(d.PrefillWorker),
		Reason:            string(d.Reason),
		CachedTokens:      uint32(d.CachedTokens),
		EffectiveIsl:      uint32(d.EffectiveISL),
		EffectiveIslRatio: d.Ratio,
		Policy:            string(d.Policy),
		ConfigHash:        d.ConfigHash,
		BlockSize:         uint32(d.BlockSize),
		PolicyBypass:      d.PolicyBypass,
		DecidedBy:         string(d.DecidedBy),
		Distance:          d.Distance,
		EffIslCheck:       checkPB(&d.EffISLCheck),
		RatioCheck:        checkPB(&d.RatioCheck),
		PrefillBusyCheck:  checkPB(&d.PrefillBusy),
		DecodeBusyCheck:   checkPB(&d.DecodeBusy),
		DeciderVersion:    deciderVersion,
		Candidates:        make([]*pb.Candidate, len(d.Candidates)),
	}
	rows := make([]pb.Candidate, len(d.Candidates))
	refs := make([]pb.WorkerRef, len(d.Candidates))
	for i := range d.Candidates {
		c := &d.Candidates[i]
		var w *pb.WorkerRef
		if c.Worker != "" {
			w = fillWorkerRef(&refs[i], c.Worker)
		}
		row := &rows[i]
		rec.Candidates[i] = row
		*row = pb.Candidate{
			Worker: w, Pool: poolPB(c.Pool), Eligible: c.Eligible, Excluded: c.Excluded,
			BlockSize: uint32(c.BlockSize), OverlapBlocks: uint32(c.OverlapBlocks), HostBlocks: uint32(c.HostBlocks),
			DiskBlocks: uint32(c.DiskBlocks), ActivePrefillTokens: c.ActivePrefillTokens, RawPrefillBlocks: c.RawPrefillBlocks,
			OverlapCredit: c.OverlapCredit, PrefillTerm: c.PrefillTerm, ActiveDecodeBlocks: c.ActiveDecodeBlocks,
			RequestBlocks: c.RequestBlocks, SharedActiveBlocks: c.SharedActiveBlocks, PotentialDecodeBlocks: c.PotentialDecodeBlocks,
			Cost: c.Cost, TieHash: uint64(c.TieHash), Probability: c.Probability, TotalKvBlocks: c.TotalKVBlocks,
			MaxNumBatchedTokens: c.MaxNumBatchedTokens, LoadKnown: c.LoadKnown, LoadKvUsedBlocks: c.LoadKVUsedBlocks,
			LoadPrefillTokens: c.LoadPrefillTokens, Picked: c.Picked,
		}
	}
	for _, ch := range req.Chains {
		rec.Chains = append(rec.Chains, &pb.HashChain{BlockSize: uint32(ch.BlockSize), BlockHashes: ch.Hashes})
	}
	return rec
}

// watermarkJSON renders a watermark as api.md shows it:
// {"kv-events": {"0": 125}}.
func watermarkJSON(w *pb.Watermark) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for _, t := range w.GetTopics() {
		m := map[string]int64{}
		for _, p := range t.GetPartitions() {
			m[strconv.Itoa(int(p.GetPartition()))] = p.GetOffset()
		}
		out[t.GetTopic()] = m
	}
	return out
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

func responseOf(rec *pb.DecisionRecord, explain bool) routeResponse {
	r := routeResponse{
		RequestID: rec.GetRequestId(), DecisionID: rec.GetDecisionId(), Mode: rec.GetMode(),
		DecodeWorker: refString(rec.GetDecodeWorker()), Reason: rec.GetReason(), Policy: rec.GetPolicy(),
		PromptTokens: rec.GetPromptTokens(), CachedTokens: rec.GetCachedTokens(), EffectiveISL: rec.GetEffectiveIsl(),
		EffectiveISLRatio: rec.GetEffectiveIslRatio(), ConfigHash: rec.GetConfigHash(),
		Watermark: watermarkJSON(rec.GetWatermark()), DecidedBy: rec.GetDecidedBy(), Distance: rec.GetDistance(),
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
