package api

import (
	"fmt"
	"math"

	"github.com/gin-gonic/gin"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

type requestEventBody struct {
	Event        string   `json:"event"`
	TTFTMs       *float64 `json:"ttft_ms"`
	OutputTokens *int64   `json:"output_tokens"`
	ITLMsMean    *float64 `json:"itl_ms_mean"`
}

var outcomeKinds = map[string]pb.OutcomeEvent_Kind{
	"prefill_done": pb.OutcomeEvent_KIND_PREFILL_DONE,
	"completed":    pb.OutcomeEvent_KIND_COMPLETED,
	"cancelled":    pb.OutcomeEvent_KIND_CANCELLED,
}

// requestEvent writes a lifecycle event to `outcomes`, keyed by the decode
// worker of the request's decision, so it lands in the same partition order
// as the worker's other events and frees the accounting on every replica.
func (s *Server) requestEvent(c *gin.Context) {
	var body requestEventBody
	if _, err := decodeBody(c, s.cfg.bodyLimit, &body); err != nil {
		fail(c, err)
		return
	}
	kind, ok := outcomeKinds[body.Event]
	if !ok {
		fail(c, unprocessable("invalid_value", "event", fmt.Sprintf("%q; want prefill_done, completed or cancelled", body.Event)))
		return
	}
	for name, v := range map[string]*float64{"ttft_ms": body.TTFTMs, "itl_ms_mean": body.ITLMsMean} {
		if v != nil && (math.IsNaN(*v) || *v < 0 || *v > events.MaxLifecycleMs) {
			fail(c, unprocessable("invalid_value", name, "must be a number of milliseconds in [0, 1e9]"))
			return
		}
	}
	if body.OutputTokens != nil && (*body.OutputTokens < 0 || *body.OutputTokens > events.MaxOutputTokens) {
		fail(c, unprocessable("invalid_value", "output_tokens", "must be ≥ 0"))
		return
	}
	ev, err := s.outcomeEvent(c.Param("id"), kind)
	if err != nil {
		fail(c, err)
		return
	}
	ev.TtftMs, ev.ItlMsMean = body.TTFTMs, body.ITLMsMean
	if body.OutputTokens != nil {
		v := uint64(*body.OutputTokens)
		ev.OutputTokens = &v
	}
	r, err := events.NewRecord(s.deps.Names, outcomeKey(ev), ev)
	if err != nil {
		fail(c, unprocessable("invalid_record", "", err.Error()))
		return
	}
	s.appendRecords(c, s.withDelta([]*kgoRecord{r}, ev)...)
}

// outcomeEvent is a lifecycle event of kind for request id, naming the
// decision the replica holds for it and that decision's workers: what
// both this endpoint and the OpenAI front door write.
func (s *Server) outcomeEvent(id string, kind pb.OutcomeEvent_Kind) (*pb.OutcomeEvent, error) {
	dec, ok := s.deps.State.DecisionRefForRequest(id)
	if !ok {
		return nil, notFound("unknown_request", "no decision for request "+id+" on this replica; send lifecycle events for requests routed by /v1/route (pass `after` offsets if you just routed it elsewhere)")
	}
	return &pb.OutcomeEvent{
		RequestId: id, DecisionId: dec.DecisionID, Kind: kind,
		DecodeWorker: dec.DecodeWorker, PrefillWorker: dec.PrefillWorker,
		EventTimeUnixNano: s.cfg.now().UnixNano(),
	}, nil
}

// outcomeKey is the record key of an outcome: its decode worker, so it
// lands in the partition order of the worker's other events.
func outcomeKey(ev *pb.OutcomeEvent) []byte {
	return events.WorkerKey(ev.GetDecodeWorker().GetWorkerId())
}
