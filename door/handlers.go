package door

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/pdrouter/pdrouter/internal/rejects"
	"github.com/pdrouter/pdrouter/internal/textcut"
)

// The headers that name a request's decision for the client. Mode and
// reason say which path the request took (local or remote prefill, and
// the decider's reason code), so that a client such as the simulator's
// report can count placements without reading the decision log.
const (
	HeaderDecisionID = "x-pdrouter-decision-id"
	HeaderRequestID  = "x-pdrouter-request-id"
	HeaderMode       = "x-pdrouter-mode"
	HeaderReason     = "x-pdrouter-reason"
)

func (d *Door) handle(k kind) gin.HandlerFunc {
	return func(c *gin.Context) { d.serve(c, k) }
}

// serve answers one OpenAI request: admit, parse, get token ids, then
// decide and forward (route).
func (d *Door) serve(c *gin.Context, k kind) {
	m := newMeasure(d.cfg.now)
	ep := k.label()
	if d.inFlight.Add(1) > int64(d.cfg.maxInFlight) {
		d.inFlight.Add(-1)
		d.metrics.rejects.Inc(rejects.Door, reasonInFlight)
		d.metrics.requests.WithLabelValues(ep, pathNone, resultRejected).Inc()
		d.fail(c, &Error{Status: http.StatusTooManyRequests, Type: typeRateLimit, Code: "too_many_requests", RetryAfter: 1,
			Message: fmt.Sprintf("the router is serving %d requests, its limit (--door-max-in-flight); retry later", d.cfg.maxInFlight)})
		return
	}
	d.metrics.inFlight.Inc()
	defer func() { d.inFlight.Add(-1); d.metrics.inFlight.Dec() }()

	req, perr := d.read(c, k)
	if perr != nil {
		d.metrics.rejects.Inc(rejects.Door, perr.reason)
		d.metrics.requests.WithLabelValues(ep, pathNone, resultRejected).Inc()
		d.fail(c, perr.Error)
		return
	}
	defer putBodyBuffer(req.fields.raw) // only an accepted one: read gives a refused one's back
	ids := req.tokenIDs
	if ids == nil {
		var f *failure
		if ids, f = d.tokenize(c.Request.Context(), req); f != nil {
			d.metrics.requests.WithLabelValues(ep, pathNone, resultOf(f)).Inc()
			if !f.clientGone {
				d.fail(c, f.err)
			}
			return
		}
	}
	d.route(c, req, ids, m)
}

// read reads and parses the body, bounded.
func (d *Door) read(c *gin.Context, k kind) (*request, *parseError) {
	body, err := readBody(http.MaxBytesReader(c.Writer, c.Request.Body, d.cfg.maxBodyBytes), c.Request.ContentLength, bodyBuffer())
	// The API bounds the body's arrival with a read deadline; a stream
	// answered for minutes must not hit it (the server would cancel the
	// request when it does).
	_ = http.NewResponseController(c.Writer).SetReadDeadline(time.Time{})
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		putBodyBuffer(body)
		return nil, refuse(reasonBodyTooLarge, tooLarge("body_too_large", "", fmt.Sprintf("the body is over %d bytes (--door-max-body-bytes)", d.cfg.maxBodyBytes)))
	case err != nil:
		putBodyBuffer(body)
		return nil, refuse(reasonInvalidJSON, invalid("invalid_body", "", "the body could not be read: "+textcut.Truncate(err.Error(), 200)))
	}
	req, perr := parseRequest(k, body, limits{maxMessages: d.cfg.maxMessages, maxPromptTokens: d.cfg.maxPromptTokens})
	if perr != nil {
		// Nothing of a refusal refers to the body: its message is built
		// from copies. (parseRequest may return its request with a
		// refusal; the caller must not give the body back again.)
		putBodyBuffer(body)
		return nil, perr
	}
	return req, nil
}

// bodyPresize bounds what the door allocates for a body on the word of its
// Content-Length, before the bytes arrive: a client that declares a large
// body and sends little holds at most this much. A body within it is read
// into one allocation of its size; io.ReadAll's doublings from 512 bytes
// allocated about twice the body, the largest part of the door's garbage per
// request, whose collection shows in the TTFT tail.
const bodyPresize = 64 << 10

// readBody reads r to its end into buf (whose contents it drops), which it
// first grows to the declared length (plus the byte that finds the end) up
// to bodyPresize; past it, the buffer grows as the bytes come.
func readBody(r io.Reader, declared int64, buf []byte) ([]byte, error) {
	n := int64(512)
	if declared >= 0 {
		n = min(declared+1, bodyPresize)
	}
	b := buf[:0]
	if int64(cap(b)) < n {
		b = make([]byte, 0, n)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// tokenize gets the ids of a text prompt from one of the model's decode
// workers, picked by the prompt's hash so that repeats of a prompt ask the
// same engine.
func (d *Door) tokenize(ctx context.Context, req *request) ([]uint32, *failure) {
	urls := d.deps.Fleet.Tokenizers(req.model)
	if len(urls) == 0 {
		return nil, &failure{err: &Error{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "model_not_found", Param: "model",
			Message: fmt.Sprintf("no decode worker with an http_url serves %q; GET /v1/models lists the models", textcut.Truncate(req.model, 64))}}
	}
	k := cacheKey(req)
	return d.tokens(ctx, urls[binary.BigEndian.Uint64(k[:8])%uint64(len(urls))], req)
}

func resultOf(f *failure) string {
	if f.clientGone {
		return resultCancelled
	}
	return resultError
}

// route decides and forwards, retrying once on other workers when the
// first ones fail before the client saw anything.
func (d *Door) route(c *gin.Context, req *request, ids []uint32, m *measure) {
	ctx := c.Request.Context()
	ep := req.kind.label()
	dr := DecideRequest{RequestID: d.cfg.newID(), Model: req.model, TokenIDs: ids, MaxTokens: req.maxTokens}
	for attempt := 0; ; attempt++ {
		dec, err := d.deps.Decider.Decide(ctx, dr)
		if err != nil {
			d.metrics.requests.WithLabelValues(ep, pathNone, resultError).Inc()
			d.fail(c, err)
			return
		}
		path := pathLocal
		if dec.Remote {
			path = pathRemote
		}
		c.Header(HeaderDecisionID, dec.DecisionID)
		c.Header(HeaderRequestID, dec.RequestID)
		c.Header(HeaderMode, path)
		c.Header(HeaderReason, dec.Reason) // "" removes a failed attempt's
		prefillDone, f := d.forward(c, req, dec, m)
		if prefillDone != nil {
			<-prefillDone // the outcomes of a request stay in order on its partition
		}
		if f == nil {
			d.metrics.requests.WithLabelValues(ep, path, resultOK).Inc()
			if t := m.ttft(); t != nil {
				d.metrics.ttft.WithLabelValues(path).Observe(t.Seconds())
			}
			if t := m.itl(); t != nil {
				d.metrics.itl.WithLabelValues(path).Observe(t.Seconds())
			}
			d.appendOutcome(ctx, Outcome{RequestID: dec.RequestID, DecisionID: dec.DecisionID, Kind: Completed,
				TTFT: m.ttft(), ITLMean: m.itl(), OutputTokens: m.outputTokens()})
			return
		}
		d.appendOutcome(ctx, Outcome{RequestID: dec.RequestID, DecisionID: dec.DecisionID, Kind: Cancelled,
			TTFT: m.ttft(), ITLMean: m.itl(), OutputTokens: m.outputTokens(), ErrorCode: f.code})
		if f.clientGone {
			d.metrics.requests.WithLabelValues(ep, path, resultCancelled).Inc()
			return
		}
		if f.unreachable {
			d.reportUnreachable(ctx, f)
		}
		if f.retriable && attempt == 0 && !c.Writer.Written() && d.cfg.retryBudget > 0 && d.cfg.now().Sub(m.arrived) < d.cfg.retryBudget {
			d.metrics.retries.WithLabelValues(retryReason(f.code)).Inc()
			d.cfg.log.Warn("door: worker failed before the first token; retrying on another", "request_id", dec.RequestID,
				"decision_id", dec.DecisionID, "decode_worker", dec.Decode.ID, "prefill_worker", dec.Prefill.ID, "err", f.err.Message)
			dr.RetryOf, dr.Exclude, dr.RequestID = dec.DecisionID, failedWorkers(dec), d.cfg.newID()
			continue
		}
		d.metrics.requests.WithLabelValues(ep, path, resultError).Inc()
		if !c.Writer.Written() {
			d.fail(c, f.err)
		}
		return
	}
}

// failedWorkers are the workers a failed decision used.
func failedWorkers(dec Decision) []string {
	if dec.Remote {
		return []string{dec.Decode.ID, dec.Prefill.ID}
	}
	return []string{dec.Decode.ID}
}

// forward runs the decision's legs. The returned channel, when not nil,
// closes once the prefill_done outcome is appended.
func (d *Door) forward(c *gin.Context, req *request, dec Decision, m *measure) (<-chan struct{}, *failure) {
	ctx := c.Request.Context()
	cctx, cancel := context.WithTimeout(ctx, d.cfg.total)
	defer cancel()
	if dec.Decode.HTTPURL == "" || (dec.Remote && dec.Prefill.HTTPURL == "") {
		return nil, &failure{err: &Error{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "worker_unreachable",
			Message: "the decision picked a worker whose registration has no http_url"}, retriable: true, code: "no_http_url"}
	}
	var kv json.RawMessage
	var prefillDone chan struct{}
	if dec.Remote {
		body, err := prefillBody(bodyBuffer(), req)
		if err != nil {
			putBodyBuffer(body)
			return nil, &failure{err: invalid("invalid_body", "", err.Error()), code: "invalid_request"}
		}
		d.sending(m)
		resp, f := d.up.post(cctx, ctx, dec.Prefill.HTTPURL+req.kind.path(), dec.RequestID, body)
		putBodyBuffer(body)
		if f != nil {
			f.worker = dec.Prefill.ID
			return nil, f
		}
		raw, f := d.up.readBody(resp, d.cfg.maxRespBytes)
		if f != nil {
			return nil, d.orClientGone(ctx, f)
		}
		var ok bool
		if kv, ok = prefillAnswer(raw); !ok {
			d.metrics.rejects.Inc(rejects.DoorUpstream, reasonMalformedBody)
			return nil, &failure{err: badGateway("upstream_malformed", "the prefill worker's answer is not a completion with object kv_transfer_params"), retriable: true, code: "upstream_malformed"}
		}
		prefillDone = make(chan struct{})
		go func() {
			defer close(prefillDone)
			d.appendOutcome(ctx, Outcome{RequestID: dec.RequestID, DecisionID: dec.DecisionID, Kind: PrefillDone})
		}()
	}
	body, err := decodeBody(bodyBuffer(), req, kv)
	if err != nil {
		putBodyBuffer(body)
		return prefillDone, &failure{err: invalid("invalid_body", "", err.Error()), code: "invalid_request"}
	}
	d.sending(m)
	resp, f := d.up.post(cctx, ctx, dec.Decode.HTTPURL+req.kind.path(), dec.RequestID, body)
	putBodyBuffer(body)
	if f != nil {
		f.worker = dec.Decode.ID
		return prefillDone, f
	}
	if req.stream {
		return prefillDone, d.orClientGone(ctx, d.relayStream(c, resp, req, m))
	}
	return prefillDone, d.orClientGone(ctx, d.relayWhole(c, resp, m))
}

// orClientGone turns a failure into a client disconnect when the client's
// request ended: a read that failed because the request was cancelled is
// not the engine's fault.
func (d *Door) orClientGone(ctx context.Context, f *failure) *failure {
	if f != nil && !f.clientGone && ctx.Err() != nil {
		return &failure{err: f.err, clientGone: true, code: "client_disconnected"}
	}
	return f
}

func (d *Door) sending(m *measure) {
	if added, first := m.sending(); first {
		d.metrics.added.Observe(added.Seconds())
	}
}

// relayWhole relays a non-streamed answer.
func (d *Door) relayWhole(c *gin.Context, resp *http.Response, m *measure) *failure {
	raw, f := d.up.readBody(resp, d.cfg.maxRespBytes)
	if f != nil {
		return f
	}
	var j struct {
		Choices *[]json.RawMessage `json:"choices"`
		Usage   *struct {
			CompletionTokens *int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &j); err != nil || j.Choices == nil {
		d.metrics.rejects.Inc(rejects.DoorUpstream, reasonMalformedBody)
		return &failure{err: badGateway("upstream_malformed", "the engine's answer is not an OpenAI completion (a JSON object with choices)"), retriable: true, code: "upstream_malformed"}
	}
	n := int64(-1)
	if j.Usage != nil && j.Usage.CompletionTokens != nil && *j.Usage.CompletionTokens >= 0 {
		n = *j.Usage.CompletionTokens
	}
	m.answered(n)
	c.Data(http.StatusOK, "application/json", raw)
	c.Writer.Flush()
	return nil
}

// appendOutcome writes an outcome, even when the client has gone (that is
// when a cancellation must be recorded), within its own deadline.
func (d *Door) appendOutcome(ctx context.Context, o Outcome) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.outcomeTimeout)
	defer cancel()
	if err := d.deps.Outcomes.AppendOutcome(ctx, o); err != nil {
		d.metrics.outcomeFailed.Inc()
		d.cfg.log.Error("door: outcome not appended", "request_id", o.RequestID, "decision_id", o.DecisionID, "err", err)
	}
}
