package replay

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// ExportSchemaVersion is the version of the export schema (EXPORT.md).
// Columns are only ever added within a version; a rename, a removal or a
// change of type or meaning is a new version, and every row carries it.
const ExportSchemaVersion = 1

// Timestamp is an event time in Unix nanoseconds. Parquet stores it as
// TIMESTAMP(NANOS, UTC); JSON lines write it as an RFC 3339 string with
// nanoseconds, which DuckDB, pandas and jq all read as a time.
type Timestamp int64

// MarshalJSON writes RFC 3339 with nanoseconds, in UTC.
func (t Timestamp) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Unix(0, int64(t)).UTC().Format(time.RFC3339Nano))), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return fmt.Errorf("replay: timestamp %s: want an RFC 3339 string", b)
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	*t = Timestamp(v.UnixNano())
	return nil
}

// DecisionRow is one row of `pdrouter export decisions`: one decision, flat,
// with its candidate table nested (a list of CandidateRow) and, with
// --join-outcomes, its request's outcome. The parquet and json tags are the
// column names; EXPORT.md documents each one.
type DecisionRow struct {
	SchemaVersion        int32     `parquet:"schema_version" json:"schema_version"`
	DecisionID           string    `parquet:"decision_id" json:"decision_id"`
	RequestID            string    `parquet:"request_id" json:"request_id"`
	RequestDigest        string    `parquet:"request_digest" json:"request_digest"`
	Model                string    `parquet:"model,dict" json:"model"`
	LoraName             string    `parquet:"lora_name,dict" json:"lora_name"`
	DecidedAt            Timestamp `parquet:"decided_at,timestamp(nanosecond:utc)" json:"decided_at"`
	ReplicaID            string    `parquet:"replica_id,dict" json:"replica_id"`
	DeciderVersion       int32     `parquet:"decider_version" json:"decider_version"`
	Mode                 string    `parquet:"mode,dict" json:"mode"`
	Reason               string    `parquet:"reason,dict" json:"reason"`
	DecodeWorker         string    `parquet:"decode_worker,dict" json:"decode_worker"`
	PrefillWorker        *string   `parquet:"prefill_worker,optional,dict" json:"prefill_worker"`
	PromptTokens         int64     `parquet:"prompt_tokens" json:"prompt_tokens"`
	ExpectedOutputTokens int64     `parquet:"expected_output_tokens" json:"expected_output_tokens"`
	BlockSize            int32     `parquet:"block_size" json:"block_size"`
	CachedTokens         int64     `parquet:"cached_tokens" json:"cached_tokens"`
	EffectiveISL         int64     `parquet:"effective_isl" json:"effective_isl"`
	EffectiveISLRatio    float64   `parquet:"effective_isl_ratio" json:"effective_isl_ratio"`
	Policy               string    `parquet:"policy,dict" json:"policy"`
	ConfigHash           string    `parquet:"config_hash,dict" json:"config_hash"`
	ConfigJSON           string    `parquet:"config_json,dict" json:"config_json"`
	PolicyBypass         bool      `parquet:"policy_bypass" json:"policy_bypass"`
	DecidedBy            string    `parquet:"decided_by,dict" json:"decided_by"`
	Distance             float64   `parquet:"distance" json:"distance"`

	EffISLCheckEvaluated      bool    `parquet:"eff_isl_check_evaluated" json:"eff_isl_check_evaluated"`
	EffISLCheckKnown          bool    `parquet:"eff_isl_check_known" json:"eff_isl_check_known"`
	EffISLCheckValue          float64 `parquet:"eff_isl_check_value" json:"eff_isl_check_value"`
	EffISLCheckLimit          float64 `parquet:"eff_isl_check_limit" json:"eff_isl_check_limit"`
	EffISLCheckHit            bool    `parquet:"eff_isl_check_hit" json:"eff_isl_check_hit"`
	EffISLCheckNote           string  `parquet:"eff_isl_check_note,dict" json:"eff_isl_check_note"`
	RatioCheckEvaluated       bool    `parquet:"ratio_check_evaluated" json:"ratio_check_evaluated"`
	RatioCheckKnown           bool    `parquet:"ratio_check_known" json:"ratio_check_known"`
	RatioCheckValue           float64 `parquet:"ratio_check_value" json:"ratio_check_value"`
	RatioCheckLimit           float64 `parquet:"ratio_check_limit" json:"ratio_check_limit"`
	RatioCheckHit             bool    `parquet:"ratio_check_hit" json:"ratio_check_hit"`
	RatioCheckNote            string  `parquet:"ratio_check_note,dict" json:"ratio_check_note"`
	PrefillBusyCheckEvaluated bool    `parquet:"prefill_busy_check_evaluated" json:"prefill_busy_check_evaluated"`
	PrefillBusyCheckKnown     bool    `parquet:"prefill_busy_check_known" json:"prefill_busy_check_known"`
	PrefillBusyCheckValue     float64 `parquet:"prefill_busy_check_value" json:"prefill_busy_check_value"`
	PrefillBusyCheckLimit     float64 `parquet:"prefill_busy_check_limit" json:"prefill_busy_check_limit"`
	PrefillBusyCheckHit       bool    `parquet:"prefill_busy_check_hit" json:"prefill_busy_check_hit"`
	PrefillBusyCheckNote      string  `parquet:"prefill_busy_check_note,dict" json:"prefill_busy_check_note"`
	DecodeBusyCheckEvaluated  bool    `parquet:"decode_busy_check_evaluated" json:"decode_busy_check_evaluated"`
	DecodeBusyCheckKnown      bool    `parquet:"decode_busy_check_known" json:"decode_busy_check_known"`
	DecodeBusyCheckValue      float64 `parquet:"decode_busy_check_value" json:"decode_busy_check_value"`
	DecodeBusyCheckLimit      float64 `parquet:"decode_busy_check_limit" json:"decode_busy_check_limit"`
	DecodeBusyCheckHit        bool    `parquet:"decode_busy_check_hit" json:"decode_busy_check_hit"`
	DecodeBusyCheckNote       string  `parquet:"decode_busy_check_note,dict" json:"decode_busy_check_note"`

	// Derived for analytics: the decode runner-up and its cost margin.
	RunnerUp       *string  `parquet:"runner_up,optional,dict" json:"runner_up"`
	RunnerUpMargin *float64 `parquet:"runner_up_margin,optional" json:"runner_up_margin"`

	// Watermark is the offset vector as JSON ({"kv-events":{"0":125}}).
	Watermark      string `parquet:"watermark" json:"watermark"`
	KafkaPartition int32  `parquet:"kafka_partition" json:"kafka_partition"`
	KafkaOffset    int64  `parquet:"kafka_offset" json:"kafka_offset"`

	Candidates []CandidateRow `parquet:"candidates,list" json:"candidates"`

	// SLO is the slo policy's predictions, null under other policies.
	SLO *SLORow `parquet:"slo,optional" json:"slo"`

	// The request's outcome (--join-outcomes), null when not joined or
	// when no outcome of the request was in the window.
	Outcome       *string    `parquet:"outcome,optional,dict" json:"outcome"`
	OutcomeEvents int32      `parquet:"outcome_events" json:"outcome_events"`
	TTFTMs        *float64   `parquet:"ttft_ms,optional" json:"ttft_ms"`
	ITLMsMean     *float64   `parquet:"itl_ms_mean,optional" json:"itl_ms_mean"`
	OutputTokens  *int64     `parquet:"output_tokens,optional" json:"output_tokens"`
	PrefillDoneAt *Timestamp `parquet:"prefill_done_at,optional,timestamp(nanosecond:utc)" json:"prefill_done_at"`
	FinishedAt    *Timestamp `parquet:"finished_at,optional,timestamp(nanosecond:utc)" json:"finished_at"`
}

// CandidateRow is one row of a decision's candidate table.
type CandidateRow struct {
	Worker                string  `parquet:"worker" json:"worker"`
	Pool                  string  `parquet:"pool" json:"pool"`
	Eligible              bool    `parquet:"eligible" json:"eligible"`
	Excluded              string  `parquet:"excluded" json:"excluded"`
	BlockSize             int32   `parquet:"block_size" json:"block_size"`
	OverlapBlocks         int32   `parquet:"overlap_blocks" json:"overlap_blocks"`
	HostBlocks            int32   `parquet:"host_blocks" json:"host_blocks"`
	DiskBlocks            int32   `parquet:"disk_blocks" json:"disk_blocks"`
	ActivePrefillTokens   int64   `parquet:"active_prefill_tokens" json:"active_prefill_tokens"`
	RawPrefillBlocks      float64 `parquet:"raw_prefill_blocks" json:"raw_prefill_blocks"`
	OverlapCredit         float64 `parquet:"overlap_credit" json:"overlap_credit"`
	PrefillTerm           float64 `parquet:"prefill_term" json:"prefill_term"`
	ActiveDecodeBlocks    int64   `parquet:"active_decode_blocks" json:"active_decode_blocks"`
	RequestBlocks         int64   `parquet:"request_blocks" json:"request_blocks"`
	SharedActiveBlocks    int64   `parquet:"shared_active_blocks" json:"shared_active_blocks"`
	PotentialDecodeBlocks int64   `parquet:"potential_decode_blocks" json:"potential_decode_blocks"`
	Cost                  float64 `parquet:"cost" json:"cost"`
	TieHash               string  `parquet:"tie_hash" json:"tie_hash"`
	Probability           float64 `parquet:"probability" json:"probability"`
	TotalKVBlocks         int64   `parquet:"total_kv_blocks" json:"total_kv_blocks"`
	MaxNumBatchedTokens   int64   `parquet:"max_num_batched_tokens" json:"max_num_batched_tokens"`
	LoadKnown             bool    `parquet:"load_known" json:"load_known"`
	LoadKVUsedBlocks      int64   `parquet:"load_kv_used_blocks" json:"load_kv_used_blocks"`
	LoadPrefillTokens     int64   `parquet:"load_prefill_tokens" json:"load_prefill_tokens"`
	Picked                bool    `parquet:"picked" json:"picked"`
	ActiveRequests        int64   `parquet:"active_requests" json:"active_requests"`
	RecentLocalPrefill    int64   `parquet:"recent_local_prefill" json:"recent_local_prefill"`
	RecentRequests        int64   `parquet:"recent_requests" json:"recent_requests"`
}

// OutcomeRow is one row of `pdrouter export outcomes`: one lifecycle event.
type OutcomeRow struct {
	SchemaVersion  int32     `parquet:"schema_version" json:"schema_version"`
	RequestID      string    `parquet:"request_id" json:"request_id"`
	DecisionID     string    `parquet:"decision_id" json:"decision_id"`
	Kind           string    `parquet:"kind,dict" json:"kind"`
	EventTime      Timestamp `parquet:"event_time,timestamp(nanosecond:utc)" json:"event_time"`
	DecodeWorker   string    `parquet:"decode_worker,dict" json:"decode_worker"`
	PrefillWorker  *string   `parquet:"prefill_worker,optional,dict" json:"prefill_worker"`
	TTFTMs         *float64  `parquet:"ttft_ms,optional" json:"ttft_ms"`
	OutputTokens   *int64    `parquet:"output_tokens,optional" json:"output_tokens"`
	ITLMsMean      *float64  `parquet:"itl_ms_mean,optional" json:"itl_ms_mean"`
	KafkaPartition int32     `parquet:"kafka_partition" json:"kafka_partition"`
	KafkaOffset    int64     `parquet:"kafka_offset" json:"kafka_offset"`
}

func hex64(v uint64) string { return fmt.Sprintf("%016x", v) }

func parseHex64(s string) (uint64, error) {
	if len(s) != 16 {
		return 0, fmt.Errorf("replay: hash %q: want 16 hex digits", s)
	}
	return strconv.ParseUint(s, 16, 64)
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// DecisionRowOf flattens a record into an export row. Hash chains are left
// out (they are as long as the prompt in blocks and serve only the state
// check); every other field of the record is in the row, so a row turns back
// into a record that recomputes to the same decision (RecordOfRow).
func DecisionRowOf(rec *pb.DecisionRecord, pos Position) DecisionRow {
	d := DecisionOf(rec)
	wm, _ := json.Marshal(WatermarkMap(rec.GetWatermark()))
	r := DecisionRow{
		SchemaVersion: ExportSchemaVersion, DecisionID: rec.GetDecisionId(), RequestID: rec.GetRequestId(),
		RequestDigest: hex64(rec.GetRequestDigest()), Model: rec.GetModel(), LoraName: rec.GetLoraName(),
		DecidedAt: Timestamp(rec.GetDecidedAtUnixNano()), ReplicaID: rec.GetReplicaId(), DeciderVersion: int32(rec.GetDeciderVersion()),
		Mode: rec.GetMode(), Reason: rec.GetReason(), DecodeWorker: d.DecodeWorker, PrefillWorker: strPtr(d.PrefillWorker),
		PromptTokens: int64(rec.GetPromptTokens()), ExpectedOutputTokens: int64(rec.GetExpectedOutputTokens()),
		BlockSize: int32(rec.GetBlockSize()), CachedTokens: int64(rec.GetCachedTokens()), EffectiveISL: int64(rec.GetEffectiveIsl()),
		EffectiveISLRatio: rec.GetEffectiveIslRatio(), Policy: rec.GetPolicy(), ConfigHash: rec.GetConfigHash(),
		ConfigJSON: rec.GetConfigJson(), PolicyBypass: rec.GetPolicyBypass(), DecidedBy: rec.GetDecidedBy(), Distance: rec.GetDistance(),
		Watermark: string(wm), KafkaPartition: pos.Partition, KafkaOffset: pos.Offset,
		Candidates: make([]CandidateRow, len(d.Candidates)),
	}
	c := rec.GetEffIslCheck()
	r.EffISLCheckEvaluated, r.EffISLCheckKnown, r.EffISLCheckValue, r.EffISLCheckLimit, r.EffISLCheckHit, r.EffISLCheckNote = c.GetEvaluated(), c.GetKnown(), c.GetValue(), c.GetLimit(), c.GetHit(), c.GetNote()
	c = rec.GetRatioCheck()
	r.RatioCheckEvaluated, r.RatioCheckKnown, r.RatioCheckValue, r.RatioCheckLimit, r.RatioCheckHit, r.RatioCheckNote = c.GetEvaluated(), c.GetKnown(), c.GetValue(), c.GetLimit(), c.GetHit(), c.GetNote()
	c = rec.GetPrefillBusyCheck()
	r.PrefillBusyCheckEvaluated, r.PrefillBusyCheckKnown, r.PrefillBusyCheckValue, r.PrefillBusyCheckLimit, r.PrefillBusyCheckHit, r.PrefillBusyCheckNote = c.GetEvaluated(), c.GetKnown(), c.GetValue(), c.GetLimit(), c.GetHit(), c.GetNote()
	c = rec.GetDecodeBusyCheck()
	r.DecodeBusyCheckEvaluated, r.DecodeBusyCheckKnown, r.DecodeBusyCheckValue, r.DecodeBusyCheckLimit, r.DecodeBusyCheckHit, r.DecodeBusyCheckNote = c.GetEvaluated(), c.GetKnown(), c.GetValue(), c.GetLimit(), c.GetHit(), c.GetNote()
	for i := range d.Candidates {
		x := &d.Candidates[i]
		r.Candidates[i] = CandidateRow{
			Worker: x.Worker, Pool: string(x.Pool), Eligible: x.Eligible, Excluded: x.Excluded, BlockSize: int32(x.BlockSize),
			OverlapBlocks: int32(x.OverlapBlocks), HostBlocks: int32(x.HostBlocks), DiskBlocks: int32(x.DiskBlocks),
			ActivePrefillTokens: x.ActivePrefillTokens, RawPrefillBlocks: x.RawPrefillBlocks, OverlapCredit: x.OverlapCredit,
			PrefillTerm: x.PrefillTerm, ActiveDecodeBlocks: x.ActiveDecodeBlocks, RequestBlocks: x.RequestBlocks,
			SharedActiveBlocks: x.SharedActiveBlocks, PotentialDecodeBlocks: x.PotentialDecodeBlocks, Cost: x.Cost,
			TieHash: hex64(uint64(x.TieHash)), Probability: x.Probability, TotalKVBlocks: x.TotalKVBlocks,
			MaxNumBatchedTokens: x.MaxNumBatchedTokens, LoadKnown: x.LoadKnown, LoadKVUsedBlocks: x.LoadKVUsedBlocks,
			LoadPrefillTokens: x.LoadPrefillTokens, Picked: x.Picked, ActiveRequests: x.ActiveRequests,
			RecentLocalPrefill: x.RecentLocalPrefill, RecentRequests: x.RecentRequests,
		}
	}
	r.SLO = sloRowOf(rec.GetSlo())
	if s := selectionOf(d, decider.PoolDecode, 0); s.RunnerUp != "" {
		r.RunnerUp, r.RunnerUpMargin = strPtr(s.RunnerUp), &s.Margin
	}
	return r
}

// RecordOfRow turns an export row back into a decision record: every field
// of the record but its hash chains. It is how what-if and tune read an
// export, and what the round-trip tests compare.
func RecordOfRow(r *DecisionRow) (*pb.DecisionRecord, error) {
	if r.SchemaVersion != ExportSchemaVersion {
		return nil, fmt.Errorf("replay: export row has schema_version %d; this build reads %d", r.SchemaVersion, ExportSchemaVersion)
	}
	digest, err := parseHex64(r.RequestDigest)
	if err != nil {
		return nil, err
	}
	var wm map[string]map[string]int64
	if err := json.Unmarshal([]byte(r.Watermark), &wm); err != nil {
		return nil, fmt.Errorf("replay: export row watermark: %w", err)
	}
	prefill := ""
	if r.PrefillWorker != nil {
		prefill = *r.PrefillWorker
	}
	rec := &pb.DecisionRecord{
		DecisionId: r.DecisionID, RequestId: r.RequestID, RequestDigest: digest, Model: r.Model, LoraName: r.LoraName,
		PromptTokens: uint32(r.PromptTokens), ExpectedOutputTokens: uint32(r.ExpectedOutputTokens), Mode: r.Mode,
		DecodeWorker: workerRef(r.DecodeWorker), PrefillWorker: workerRef(prefill), Reason: r.Reason,
		CachedTokens: uint32(r.CachedTokens), EffectiveIsl: uint32(r.EffectiveISL), EffectiveIslRatio: r.EffectiveISLRatio,
		Policy: r.Policy, ConfigHash: r.ConfigHash, ConfigJson: r.ConfigJSON, Watermark: watermarkOf(wm),
		BlockSize: uint32(r.BlockSize), PolicyBypass: r.PolicyBypass, DecidedBy: r.DecidedBy, Distance: r.Distance,
		EffIslCheck:       &pb.Check{Name: string(decider.CheckEffISL), Evaluated: r.EffISLCheckEvaluated, Known: r.EffISLCheckKnown, Value: r.EffISLCheckValue, Limit: r.EffISLCheckLimit, Hit: r.EffISLCheckHit, Note: r.EffISLCheckNote},
		RatioCheck:        &pb.Check{Name: string(decider.CheckRatio), Evaluated: r.RatioCheckEvaluated, Known: r.RatioCheckKnown, Value: r.RatioCheckValue, Limit: r.RatioCheckLimit, Hit: r.RatioCheckHit, Note: r.RatioCheckNote},
		PrefillBusyCheck:  &pb.Check{Name: string(decider.CheckPrefillBusy), Evaluated: r.PrefillBusyCheckEvaluated, Known: r.PrefillBusyCheckKnown, Value: r.PrefillBusyCheckValue, Limit: r.PrefillBusyCheckLimit, Hit: r.PrefillBusyCheckHit, Note: r.PrefillBusyCheckNote},
		DecodeBusyCheck:   &pb.Check{Name: string(decider.CheckDecodeBusy), Evaluated: r.DecodeBusyCheckEvaluated, Known: r.DecodeBusyCheckKnown, Value: r.DecodeBusyCheckValue, Limit: r.DecodeBusyCheckLimit, Hit: r.DecodeBusyCheckHit, Note: r.DecodeBusyCheckNote},
		DecidedAtUnixNano: int64(r.DecidedAt), ReplicaId: r.ReplicaID, DeciderVersion: uint32(r.DeciderVersion),
		Candidates: make([]*pb.Candidate, len(r.Candidates)),
		Slo:        r.SLO.record(),
	}
	// A check the decider did not evaluate carries no name (its zero value).
	for _, c := range []*pb.Check{rec.EffIslCheck, rec.RatioCheck, rec.PrefillBusyCheck, rec.DecodeBusyCheck} {
		if !c.Evaluated {
			c.Name = ""
		}
	}
	for i := range r.Candidates {
		x := &r.Candidates[i]
		th, err := parseHex64(x.TieHash)
		if err != nil {
			return nil, err
		}
		row := new(pb.Candidate)
		rec.Candidates[i] = row
		fillCandidate(row, new(pb.WorkerRef), &decider.Candidate{
			Worker: x.Worker, Pool: decider.Pool(x.Pool), Eligible: x.Eligible, Excluded: x.Excluded, BlockSize: int(x.BlockSize),
			OverlapBlocks: int(x.OverlapBlocks), HostBlocks: int(x.HostBlocks), DiskBlocks: int(x.DiskBlocks),
			ActivePrefillTokens: x.ActivePrefillTokens, RawPrefillBlocks: x.RawPrefillBlocks, OverlapCredit: x.OverlapCredit,
			PrefillTerm: x.PrefillTerm, ActiveDecodeBlocks: x.ActiveDecodeBlocks, RequestBlocks: x.RequestBlocks,
			SharedActiveBlocks: x.SharedActiveBlocks, PotentialDecodeBlocks: x.PotentialDecodeBlocks, Cost: x.Cost,
			TieHash: decider.Hash64(th), Probability: x.Probability, TotalKVBlocks: x.TotalKVBlocks,
			MaxNumBatchedTokens: x.MaxNumBatchedTokens, LoadKnown: x.LoadKnown, LoadKVUsedBlocks: x.LoadKVUsedBlocks,
			LoadPrefillTokens: x.LoadPrefillTokens, Picked: x.Picked, ActiveRequests: x.ActiveRequests,
			RecentLocalPrefill: x.RecentLocalPrefill, RecentRequests: x.RecentRequests,
		})
	}
	return rec, nil
}

// watermarkOf is the inverse of WatermarkMap: topics in events.AllTopics
// order and partitions ascending, as the statestore writes watermarks.
func watermarkOf(m map[string]map[string]int64) *pb.Watermark {
	w := &pb.Watermark{}
	for _, t := range []string{"kv-events", "load", "workers", "decisions", "outcomes"} {
		ps := m[t]
		if len(ps) == 0 {
			continue
		}
		to := &pb.TopicOffsets{Topic: t}
		var parts []int
		for k := range ps {
			if p, err := strconv.Atoi(k); err == nil {
				parts = append(parts, p)
			}
		}
		slices.Sort(parts)
		for _, p := range parts {
			to.Partitions = append(to.Partitions, &pb.PartitionOffset{Partition: int32(p), Offset: ps[strconv.Itoa(p)]})
		}
		w.Topics = append(w.Topics, to)
	}
	return w
}

// OutcomeRowOf flattens an outcome event.
func OutcomeRowOf(o *pb.OutcomeEvent, pos Position) OutcomeRow {
	r := OutcomeRow{
		SchemaVersion: ExportSchemaVersion, RequestID: o.GetRequestId(), DecisionID: o.GetDecisionId(), Kind: outcomeKind(o.GetKind()),
		EventTime: Timestamp(o.GetEventTimeUnixNano()), DecodeWorker: workerID(o.GetDecodeWorker()),
		PrefillWorker: strPtr(workerID(o.GetPrefillWorker())), TTFTMs: o.TtftMs, ITLMsMean: o.ItlMsMean,
		KafkaPartition: pos.Partition, KafkaOffset: pos.Offset,
	}
	if o.OutputTokens != nil {
		n := int64(o.GetOutputTokens())
		r.OutputTokens = &n
	}
	return r
}

// outcomeKind names an outcome kind as the request events API does.
func outcomeKind(k pb.OutcomeEvent_Kind) string {
	switch k {
	case pb.OutcomeEvent_KIND_PREFILL_DONE:
		return "prefill_done"
	case pb.OutcomeEvent_KIND_COMPLETED:
		return "completed"
	case pb.OutcomeEvent_KIND_CANCELLED:
		return "cancelled"
	}
	return "unspecified"
}
