package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/textcut"
	"github.com/pdrouter/pdrouter/kvhash"
)

// maxRequestIDLen bounds request ids: they become record fields and keys of
// the idempotency index.
const maxRequestIDLen = 256

type routeRequest struct {
	RequestID            string                      `json:"request_id"`
	Model                string                      `json:"model"`
	TokenIDs             []uint32                    `json:"token_ids"`
	BlockHashes          []hashValue                 `json:"block_hashes"`
	BlockSize            int                         `json:"block_size"`
	PromptTokens         *int64                      `json:"prompt_tokens"`
	LoraName             *string                     `json:"lora_name"`
	ExpectedOutputTokens *int64                      `json:"expected_output_tokens"`
	After                map[string]map[string]int64 `json:"after"`
}

// hashValue is a 64-bit hash in JSON: a number (exact, up to 2^64−1) or a
// string of decimal digits or 0x-prefixed hex, for clients whose JSON numbers
// are doubles.
type hashValue uint64

func (h *hashValue) UnmarshalJSON(b []byte) error {
	s := string(b)
	if unq, err := strconv.Unquote(s); err == nil {
		s = unq
	}
	base := 10
	if rest, ok := strings.CutPrefix(s, "0x"); ok {
		s, base = rest, 16
	}
	v, err := strconv.ParseUint(s, base, 64)
	if err != nil {
		return &fieldError{field: "block_hashes", msg: fmt.Sprintf("%s is not a 64-bit unsigned hash (a number, a decimal string or 0x hex)", b)}
	}
	*h = hashValue(v)
	return nil
}

// parsed is a validated route request.
type parsed struct {
	id        string
	model     string
	tokens    []uint32
	hashes    []uint64
	blockSize int
	prompt    int64
	expected  uint32
	lora      string
	after     Offsets
}

func (s *Server) parseRoute(c *gin.Context) (*parsed, error) {
	var req routeRequest
	bp := bodyPool.Get().(*[]byte)
	raw, err := readBody(c, s.cfg.bodyLimit, *bp)
	if err == nil {
		err = decodeRouteBody(raw, s.cfg.maxAfter, &req)
	}
	if raw != nil && cap(raw) <= maxPooledBody {
		*bp = raw[:0] // req holds no part of raw: strings and slices are copies
	}
	bodyPool.Put(bp)
	if err != nil {
		return nil, err
	}
	p := &parsed{id: req.RequestID, model: req.Model}
	if len(p.id) > maxRequestIDLen {
		return nil, unprocessable("invalid_request_id", "request_id", fmt.Sprintf("is %d bytes; at most %d", len(p.id), maxRequestIDLen))
	}
	if req.PromptTokens != nil && *req.PromptTokens < 0 {
		return nil, unprocessable("invalid_value", "prompt_tokens", "is negative; a prompt's length in tokens is at least 0")
	}
	if req.LoraName != nil {
		p.lora = *req.LoraName
	}
	if req.ExpectedOutputTokens != nil {
		if *req.ExpectedOutputTokens < 0 || *req.ExpectedOutputTokens > 1<<31 {
			return nil, unprocessable("invalid_value", "expected_output_tokens", "must be in [0, 2147483648]")
		}
		p.expected = uint32(*req.ExpectedOutputTokens)
	}
	switch {
	case req.TokenIDs != nil && req.BlockHashes != nil:
		return nil, unprocessable("ambiguous_prompt", "block_hashes", "send either token_ids or block_hashes, not both")
	case req.TokenIDs != nil:
		if len(req.TokenIDs) == 0 {
			return nil, unprocessable("invalid_value", "token_ids", "is empty; send the prompt's token ids")
		}
		if len(req.TokenIDs) > s.cfg.maxTokens {
			return nil, tooLarge("too_many_tokens", "token_ids", fmt.Sprintf("%d tokens; at most %d", len(req.TokenIDs), s.cfg.maxTokens))
		}
		if req.PromptTokens != nil && *req.PromptTokens != int64(len(req.TokenIDs)) {
			return nil, unprocessable("invalid_value", "prompt_tokens", fmt.Sprintf("is %d but token_ids has %d tokens; leave it out with token_ids", *req.PromptTokens, len(req.TokenIDs)))
		}
		if req.BlockSize != 0 {
			return nil, unprocessable("invalid_value", "block_size", "goes with block_hashes only; with token_ids the router hashes per worker block size")
		}
		p.tokens, p.prompt = req.TokenIDs, int64(len(req.TokenIDs))
	case req.BlockHashes != nil:
		if req.PromptTokens == nil {
			return nil, unprocessable("missing_field", "prompt_tokens", "block_hashes need prompt_tokens, the prompt's length in tokens")
		}
		if req.BlockSize <= 0 || req.BlockSize > events.MaxBlockSize {
			return nil, unprocessable("invalid_value", "block_size", fmt.Sprintf("block_hashes need block_size, the tokens per block they were hashed with, in [1, %d]", events.MaxBlockSize))
		}
		if *req.PromptTokens > int64(s.cfg.maxTokens) {
			return nil, tooLarge("too_many_tokens", "prompt_tokens", fmt.Sprintf("must be in [0, %d]", s.cfg.maxTokens))
		}
		if full := *req.PromptTokens / int64(req.BlockSize); int64(len(req.BlockHashes)) > full {
			return nil, unprocessable("invalid_value", "block_hashes", fmt.Sprintf("%d hashes, but %d prompt tokens hold only %d complete blocks of %d", len(req.BlockHashes), *req.PromptTokens, full, req.BlockSize))
		}
		p.hashes = hashesOf(req.BlockHashes)
		p.blockSize, p.prompt = req.BlockSize, *req.PromptTokens
	default:
		return nil, unprocessable("missing_field", "token_ids", "send token_ids (or block_hashes with block_size and prompt_tokens)")
	}
	after, err := parseAfter(req.After)
	if err != nil {
		return nil, err
	}
	if err := s.checkAfterCell(after); err != nil {
		return nil, err
	}
	p.after = after
	return p, nil
}

// decodeRouteBody decodes a route body into req (zero): by the fast path
// when it takes the body, else strictly by decodeJSON.
func decodeRouteBody(raw []byte, maxAfter int, req *routeRequest) error {
	if fastRouteBody(raw, req, maxAfter) {
		return nil
	}
	*req = routeRequest{}
	return decodeJSON(raw, maxAfter, req)
}

// parseAfter validates an `after` offset vector. Its size is bounded where
// it is decoded (fastRouteBody, checkKeys).
func parseAfter(in map[string]map[string]int64) (Offsets, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := Offsets{}
	for t, ps := range in {
		topic, err := events.ParseTopic(t)
		if err != nil {
			return nil, unprocessable("invalid_value", "after."+textcut.Truncate(t, maxQuotedBytes), fmt.Sprintf("%s is not a topic of pdrouter's log", quoted(t)))
		}
		m := map[int32]int64{}
		for ps, off := range ps {
			field := "after." + t + "." + textcut.Truncate(ps, maxQuotedBytes)
			p, err := strconv.ParseInt(ps, 10, 32)
			if err != nil || p < 0 {
				return nil, unprocessable("invalid_value", field, "partition keys are non-negative integers")
			}
			// The wait is for the offset after it: MaxInt64 has none.
			if off < 0 || off == math.MaxInt64 {
				return nil, unprocessable("invalid_value", field, fmt.Sprintf("offsets are in [0, %d)", int64(math.MaxInt64)))
			}
			m[int32(p)] = off
		}
		out[topic] = m
	}
	return out, nil
}

func (s *Server) route(c *gin.Context) {
	p, err := s.parseRoute(c)
	if err != nil {
		fail(c, err)
		return
	}
	// A request id the router generates is new by construction (a ULID's
	// 80 random bits): no decision can exist for it, so it skips the
	// idempotency lookup, which reads the store (a Pebble seek).
	generated := p.id == ""
	if generated {
		p.id = s.cfg.newID()
	}
	explain := c.Query("explain") == "true"
	unlock := s.inflight.lock(p.id)
	defer unlock()
	if !generated {
		if sd, ok := s.deps.State.DecisionForRequest(p.id); ok {
			rec := sd.Record
			if !sd.Complete && (sd.Partition < 0 || rec.GetRequestDigest() == 0) {
				// Learnt from a load delta (even one of this replica's own
				// decisions, whose position it knows): the header names the
				// decision but not the prompt it was made for; the record on
				// the log does.
				var err error
				if rec, err = s.wholeDecision(c.Request.Context(), sd); err != nil {
					fail(c, err)
					return
				}
				sd.Complete = true
			}
			if err := sameRequest(p, rec); err != nil {
				fail(c, err)
				return
			}
			if explain && !sd.Complete { // the table: the whole record
				var err error
				if rec, err = s.wholeDecision(c.Request.Context(), sd); err != nil {
					fail(c, err)
					return
				}
			}
			s.metrics.idempotent.Inc()
			resp := responseOf(rec, explain)
			resp.Idempotent = true
			s.writeRoute(c, &resp, rec.GetWatermark())
			return
		}
	}
	if p.after != nil {
		ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.afterTimeout)
		err := s.deps.State.WaitApplied(ctx, p.after)
		cancel()
		if err != nil {
			fail(c, &Error{Status: http.StatusGatewayTimeout, Code: "after_timeout", Field: "after",
				Message: fmt.Sprintf("this replica did not reach the requested offsets within %s: %s", s.cfg.afterTimeout, textcut.Truncate(err.Error(), 256))})
			return
		}
	}
	rec, err := s.commitDecision(c.Request.Context(), p, "", nil)
	if err != nil {
		fail(c, err)
		return
	}
	resp := responseOf(rec, explain)
	s.writeRoute(c, &resp, rec.GetWatermark())
}

// commitDecision decides p, makes the decision durable and counts it: the
// decision path of /v1/route and of the OpenAI front door. retryOf and
// exclude are the door's retry: the decision it retries, and the workers
// (worker ids) that failed it, unavailable to this decision.
func (s *Server) commitDecision(ctx context.Context, p *parsed, retryOf string, exclude []string) (*pb.DecisionRecord, error) {
	rec, err := s.decide(p, exclude)
	if err != nil {
		return nil, err
	}
	// One clock reading stamps both: the id's time is decided_at cut to
	// its millisecond, where a search of the decisions topic by the id
	// alone looks for the record (decisionsearch.go).
	now := s.cfg.now()
	rec.DecisionId = s.cfg.newDecisionID(now)
	rec.DecidedAtUnixNano = now.UnixNano()
	rec.ReplicaId = s.cfg.replicaID
	rec.ExpectedOutputTokens = p.expected
	rec.LoraName = p.lora
	rec.ConfigJson = s.configJSON()
	rec.RetryOfDecisionId = retryOf
	pos, delta, value, err := s.appendDecision(ctx, rec)
	if err != nil {
		return nil, err
	}
	if s.recordAt != nil {
		s.recordAt.RecordLocalDecisionAt(rec, value, pos, delta)
	} else {
		s.deps.State.RecordLocalDecision(rec)
	}
	s.metrics.observeDecision(rec)
	return rec, nil
}

// decide runs the decider under one consistent read of the state, with
// the workers named in exclude unavailable.
func (s *Server) decide(p *parsed, exclude []string) (*pb.DecisionRecord, error) {
	start := time.Now()
	d := s.decisions.Get().(*decider.Decision)
	defer s.decisions.Put(d)
	var (
		req *decider.Request
		wm  *pb.Watermark
		err error
	)
	s.deps.State.Read(func(v decider.View, w *pb.Watermark) {
		if len(exclude) > 0 {
			v = &excludingView{View: v, ids: exclude}
		}
		model, merr := resolveModel(v.Workers(), p.model)
		if merr != nil {
			err = merr
			return
		}
		req = &decider.Request{ID: p.id, Model: model, PromptTokens: p.prompt, Chains: chains(v.Workers(), model, p)}
		if derr := s.deps.Decider.DecideInto(d, v, req); derr != nil {
			err = decideError(derr)
			return
		}
		wm = w
	})
	if err != nil {
		s.metrics.decisionSecs.Observe(time.Since(start).Seconds())
		return nil, err
	}
	// The decision is ours (d holds no reference into the state): the
	// record is built after the read lock is released.
	rec := decisionRecord(d, req, s.cfg.budget.maxCandidates)
	rec.Watermark = wm
	rec.RequestDigest = requestDigest(p)
	s.metrics.decisionSecs.Observe(time.Since(start).Seconds())
	return rec, nil
}

// resolveModel applies api.md: the model may be left out when only one model
// is served.
func resolveModel(ws []decider.WorkerInfo, model string) (string, error) {
	var models []string
	for i := range ws {
		if !slices.Contains(models, ws[i].Model) {
			models = append(models, ws[i].Model)
		}
	}
	slices.Sort(models)
	switch {
	case model != "" && slices.Contains(models, model):
		return model, nil
	case model != "":
		return "", unprocessable("unknown_model", "model", fmt.Sprintf("no registered worker serves %q; served: %s", model, listOrNone(models)))
	case len(models) == 1:
		return models[0], nil
	case len(models) == 0:
		return "", unavailable("no_workers", "no worker is registered yet; POST /v1/workers first", 1)
	}
	return "", unprocessable("missing_field", "model", fmt.Sprintf("this router serves %d models (%s); name one", len(models), strings.Join(models, ", ")))
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// chains hashes the prompt once per block size among the model's workers.
func chains(ws []decider.WorkerInfo, model string, p *parsed) []decider.Chain {
	if p.hashes != nil {
		return []decider.Chain{{BlockSize: p.blockSize, Hashes: p.hashes}}
	}
	var out []decider.Chain
	for i := range ws {
		bs := ws[i].BlockSize
		if ws[i].Model != model || bs <= 0 || slices.ContainsFunc(out, func(c decider.Chain) bool { return c.BlockSize == bs }) {
			continue
		}
		out = append(out, decider.Chain{BlockSize: bs, Hashes: kvhash.Chain(nil, p.tokens, bs, 0, false)})
	}
	slices.SortFunc(out, func(a, b decider.Chain) int { return a.BlockSize - b.BlockSize })
	return out
}

// requestDigest names the prompt: kvhash.TokenDigest of its token ids, or
// kvhash.Digest of the given block hashes.
func requestDigest(p *parsed) uint64 {
	if p.tokens != nil {
		return kvhash.TokenDigest(p.tokens)
	}
	return kvhash.Digest(p.hashes)
}

// sameRequest checks that a request reusing a request_id is the one the id
// was decided for: the same prompt (its digest and length), the same model
// when it names one, and the same LoRA adapter. A retry gets the stored
// decision; another request under the same id gets 409, never a decision
// made for a different prompt.
func sameRequest(p *parsed, rec *pb.DecisionRecord) error {
	var differs string
	switch {
	case requestDigest(p) != rec.GetRequestDigest() || p.prompt != int64(rec.GetPromptTokens()):
		differs = "prompt"
	case p.model != "" && p.model != rec.GetModel():
		differs = "model"
	case p.lora != rec.GetLoraName():
		differs = "lora_name"
	default:
		return nil
	}
	return conflict("request_id_conflict", "request_id", fmt.Sprintf(
		"request_id %s was decided for a request with another %s; send a new request_id for a new request", quoted(p.id), differs))
}

func decideError(err error) error {
	var re *decider.RequestError
	var nw *decider.NoWorkerError
	switch {
	case errors.As(err, &re):
		return unprocessable("invalid_request", re.Field, re.Error())
	case errors.As(err, &nw):
		return unavailable("no_decode_worker", nw.Error(), 1)
	}
	return err
}

// appendDecision makes the decision durable before it is answered
// (design.md invariant 5), and returns where it landed and the record
// value written (rec encoded), and where its load delta landed (Offset -1:
// none written). On failure the decision is dropped, never returned: the
// caller retries with the same request_id.
func (s *Server) appendDecision(ctx context.Context, rec *pb.DecisionRecord) (decision, delta Position, value []byte, err error) {
	start := time.Now()
	r, err := s.decisionLogRecord(rec)
	if err != nil {
		return Position{}, Position{}, nil, err
	}
	ex := s.expecter
	if ex != nil {
		ex.ExpectLocalDecision(rec, r.Value)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.auditTimeout)
	defer cancel()
	s.metrics.auditInFlight.Inc()
	pos, err := s.deps.Log.Append(ctx, s.withDelta([]*kgoRecord{r}, rec)...)
	s.metrics.auditInFlight.Dec()
	s.metrics.auditSecs.Observe(time.Since(start).Seconds())
	if err != nil {
		if ex != nil {
			ex.UnexpectLocalDecision(rec.GetDecisionId())
		}
		s.metrics.auditFailures.Inc()
		s.cfg.log.Error("decision not durable; answering 503", "request_id", rec.GetRequestId(), "err", err)
		return Position{}, Position{}, nil, unavailable("audit_log_unavailable", "the decision could not be made durable on the decisions topic; retry with the same request_id", 1)
	}
	decision = Position{Topic: events.TopicDecisions, Partition: -1, Offset: -1}
	delta = Position{Topic: events.TopicLoadDeltas, Partition: -1, Offset: -1}
	if len(pos) >= 1 {
		decision = pos[0]
	}
	if len(pos) >= 2 {
		delta = pos[1]
	}
	return decision, delta, r.Value, nil
}

// configJSON is the decider's canonical configuration, recorded in every
// decision. The decider's configuration is fixed at construction, so it is
// rendered once.
func (s *Server) configJSON() string {
	s.configOnce.Do(func() {
		cfg := s.deps.Decider.Config()
		s.configJSONText = string(cfg.CanonicalJSON())
	})
	return s.configJSONText
}
