package replay

import (
	"context"
	"strconv"
	"time"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Explanation answers "why did it go there" for one decision: the record's
// candidate table, the runner-up in each pool and its margin, the rule that
// settled the mode and its distance, and the two checks of invariant 6.
// Its JSON is the body of GET /v1/decisions/{id}/explain and of
// `pdrouter explain --json`; fields are only ever added.
type Explanation struct {
	DecisionID string `json:"decision_id"`
	RequestID  string `json:"request_id"`
	// RetryOf is the decision this one retried after its worker failed
	// before the first token (the OpenAI front door); its workers are
	// excluded "unavailable" in this table.
	RetryOf        string                      `json:"retry_of_decision_id,omitempty"`
	Model          string                      `json:"model"`
	Mode           string                      `json:"mode"`
	Reason         string                      `json:"reason"`
	DecodeWorker   string                      `json:"decode_worker"`
	PrefillWorker  *string                     `json:"prefill_worker"`
	Policy         string                      `json:"policy"`
	ConfigHash     string                      `json:"config_hash"`
	ConfigJSON     string                      `json:"config_json"`
	DeciderVersion uint32                      `json:"decider_version"`
	DecidedAt      time.Time                   `json:"decided_at"`
	ReplicaID      string                      `json:"replica_id"`
	Watermark      map[string]map[string]int64 `json:"watermark"`
	PromptTokens   int64                       `json:"prompt_tokens"`
	CachedTokens   int64                       `json:"cached_tokens"`
	EffectiveISL   int64                       `json:"effective_isl"`
	Ratio          float64                     `json:"effective_isl_ratio"`

	// Candidates is the table as recorded (decode rows, then prefill rows).
	Candidates []decider.Candidate `json:"candidates"`
	// Decode and Prefill explain the worker choice in each pool.
	Decode  Selection `json:"decode_selection"`
	Prefill Selection `json:"prefill_selection"`
	// ModeDecision explains local versus remote.
	ModeDecision ModeDecision `json:"mode_decision"`

	// PureCheck recomputes the decision from the record alone.
	PureCheck PureCheck `json:"pure_check"`
	// StateCheck rebuilds the state at the watermark and decides again.
	StateCheck StateCheck `json:"state_check"`
	// Truncation says what the record left out to stay within its size
	// budget, and what that means for the checks; nil when it is whole.
	Truncation *Truncation `json:"truncation,omitempty"`
}

// StateChecker rebuilds the state a record was decided from and decides
// again. The CLI's implementation (KafkaStateChecker) reads the Kafka log;
// the API has none, because a replica's API only appends to the log.
type StateChecker interface {
	CheckState(ctx context.Context, rec *pb.DecisionRecord) StateCheck
}

// ExplainOptions configure Explain.
type ExplainOptions struct {
	// State runs the state check; when nil it is skipped and
	// StateCheck.NotPerformed says NoStateReason.
	State         StateChecker
	NoStateReason string
}

// Explain explains one decision record. The pure check always runs (it
// needs nothing but the record); the state check runs when opts.State is
// set. Problems of either check are reported inside the explanation, never
// as an error: an explanation of a broken record is exactly what a user
// needs to see.
func Explain(ctx context.Context, rec *pb.DecisionRecord, opts ExplainOptions) *Explanation {
	d := DecisionOf(rec)
	e := &Explanation{
		DecisionID: rec.GetDecisionId(), RequestID: rec.GetRequestId(), RetryOf: rec.GetRetryOfDecisionId(), Model: rec.GetModel(),
		Mode: rec.GetMode(), Reason: rec.GetReason(), DecodeWorker: d.DecodeWorker,
		Policy: rec.GetPolicy(), ConfigHash: rec.GetConfigHash(), ConfigJSON: rec.GetConfigJson(),
		DeciderVersion: rec.GetDeciderVersion(), DecidedAt: time.Unix(0, rec.GetDecidedAtUnixNano()).UTC(),
		ReplicaID: rec.GetReplicaId(), Watermark: WatermarkMap(rec.GetWatermark()),
		PromptTokens: d.PromptTokens, CachedTokens: d.CachedTokens, EffectiveISL: d.EffectiveISL, Ratio: d.Ratio,
		Candidates: d.Candidates, ModeDecision: modeOf(d), Truncation: TruncationOf(rec),
	}
	if d.PrefillWorker != "" {
		p := d.PrefillWorker
		e.PrefillWorker = &p
	}
	temp := 0.0
	if cfg, err := ParseConfig(rec.GetConfigJson()); err == nil {
		temp = cfg.Temperature
	}
	e.Decode = selectionOf(d, decider.PoolDecode, temp)
	e.Prefill = selectionOf(d, decider.PoolPrefill, temp)
	e.PureCheck, _ = CheckPure(rec)
	if opts.State != nil {
		e.StateCheck = opts.State.CheckState(ctx, rec)
	} else {
		e.StateCheck = StateCheck{NotPerformed: opts.NoStateReason, Differences: []Difference{}}
		if e.StateCheck.NotPerformed == "" {
			e.StateCheck.NotPerformed = "no state checker was configured"
		}
	}
	return e
}

// WatermarkMap renders a watermark as api.md shows it: {"kv-events": {"0": 125}}.
func WatermarkMap(w *pb.Watermark) map[string]map[string]int64 {
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
