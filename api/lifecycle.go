package api

import (
	"errors"
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
// A replica of --load-deltas snapshots holds only its own requests: one
// that holds no decision for the id forwards the event instead
// (forwards.go), and the replica that decided appends it.
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
	m := lifecycleMeasures{ttftMs: body.TTFTMs, itlMsMean: body.ITLMsMean}
	if body.OutputTokens != nil {
		v := uint64(*body.OutputTokens)
		m.outputTokens = &v
	}
	id := c.Param("id")
	recs, err := s.lifecycleRecords(id, kind, m, s.cfg.now().UnixNano())
	if s.cfg.forwardEvents && isUnknownRequest(err) {
		s.forwardEvent(c, id, kind, m)
		return
	}
	if err != nil {
		fail(c, err)
		return
	}
	s.appendRecords(c, recs...)
}

// lifecycleMeasures are what a client measured of a request, as it posted
// them (all optional).
type lifecycleMeasures struct {
	ttftMs, itlMsMean *float64
	outputTokens      *uint64
}

// lifecycleRecords are the records of a lifecycle event of kind for
// request id at event time at (Unix ns): its outcome, naming the decision
// this replica holds, and the outcome's load delta. Both a client's post
// and a forwarded event (forwards.go) append them, so that a replica
// applies a forwarded event exactly as one posted to it. The error is the
// API's: 404 unknown_request when the replica holds no decision for id.
func (s *Server) lifecycleRecords(id string, kind pb.OutcomeEvent_Kind, m lifecycleMeasures, at int64) ([]*kgoRecord, error) {
	ev, err := s.outcomeEvent(id, kind)
	if err != nil {
		return nil, err
	}
	ev.EventTimeUnixNano = at
	ev.TtftMs, ev.ItlMsMean, ev.OutputTokens = m.ttftMs, m.itlMsMean, m.outputTokens
	r, err := events.NewRecord(s.deps.Names, outcomeKey(ev), ev)
	if err != nil {
		return nil, unprocessable("invalid_record", "", err.Error())
	}
	return s.withDelta([]*kgoRecord{r}, ev), nil
}

// outcomeEvent is a lifecycle event of kind for request id, naming the
// decision the replica holds for it and that decision's workers: what
// both this endpoint and the OpenAI front door write.
func (s *Server) outcomeEvent(id string, kind pb.OutcomeEvent_Kind) (*pb.OutcomeEvent, error) {
	dec, ok := s.deps.State.DecisionRefForRequest(id)
	if !ok {
		return nil, notFound(codeUnknownRequest, "no decision for request "+id+" on this replica; send lifecycle events for requests routed by /v1/route (pass `after` offsets if you just routed it elsewhere)")
	}
	return &pb.OutcomeEvent{
		RequestId: id, DecisionId: dec.DecisionID, Kind: kind,
		DecodeWorker: dec.DecodeWorker, PrefillWorker: dec.PrefillWorker,
		EventTimeUnixNano: s.cfg.now().UnixNano(),
	}, nil
}

// codeUnknownRequest is the error code of a lifecycle event for a request
// this replica holds no decision for.
const codeUnknownRequest = "unknown_request"

// isUnknownRequest reports whether err is outcomeEvent's refusal of a
// request this replica holds no decision for.
func isUnknownRequest(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == codeUnknownRequest
}

// outcomeKey is the record key of an outcome: its decode worker, so it
// lands in the partition order of the worker's other events.
func outcomeKey(ev *pb.OutcomeEvent) []byte {
	return events.WorkerKey(ev.GetDecodeWorker().GetWorkerId())
}
