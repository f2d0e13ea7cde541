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
		if v != nil && (math.IsNaN(*v) || *v < 0 || *v > 1e9) {
			fail(c, unprocessable("invalid_value", name, "must be a number of milliseconds in [0, 1e9]"))
			return
		}
	}
	if body.OutputTokens != nil && (*body.OutputTokens < 0 || *body.OutputTokens > 1<<40) {
		fail(c, unprocessable("invalid_value", "output_tokens", "must be ≥ 0"))
		return
	}
	id := c.Param("id")
	dec, ok := s.deps.State.DecisionRefForRequest(id)
	if !ok {
		fail(c, notFound("unknown_request", "no decision for request "+id+" on this replica; send lifecycle events for requests routed by /v1/route (pass `after` offsets if you just routed it elsewhere)"))
		return
	}
	ev := &pb.OutcomeEvent{
		RequestId: id, DecisionId: dec.DecisionID, Kind: kind,
		DecodeWorker: dec.DecodeWorker, PrefillWorker: dec.PrefillWorker,
		EventTimeUnixNano: s.cfg.now().UnixNano(), TtftMs: body.TTFTMs, ItlMsMean: body.ITLMsMean,
	}
	if body.OutputTokens != nil {
		v := uint64(*body.OutputTokens)
		ev.OutputTokens = &v
	}
	s.appendAndAnswer(c, events.WorkerKey(dec.DecodeWorker.GetWorkerId()), ev)
}
