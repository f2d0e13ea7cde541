package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/door"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/textcut"
)

// The OpenAI front door (package door) is served on /v1 behind the API's
// authentication. It depends on the three narrow interfaces below, which
// the Server implements in-process: a decision goes through the same path
// as POST /v1/route (commitDecision: durable before it is used), and an
// outcome through the same as POST /v1/requests/{id}/events.

// doorDeps adapts a Server to door.Deps.
type doorDeps struct {
	s     *Server
	fleet *fleetIndex
}

func (s *Server) doorDeps() door.Deps {
	a := doorDeps{s: s, fleet: &fleetIndex{}}
	return door.Deps{Decider: a, Fleet: a, Outcomes: a, Health: a}
}

// Decide implements door.Decider.
func (a doorDeps) Decide(ctx context.Context, r door.DecideRequest) (door.Decision, error) {
	p := &parsed{id: r.RequestID, model: r.Model, tokens: r.TokenIDs, prompt: int64(len(r.TokenIDs)), expected: r.MaxTokens}
	if len(p.tokens) > a.s.cfg.maxTokens {
		return door.Decision{}, &door.Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "too_many_tokens", Param: "prompt",
			Message: fmt.Sprintf("the prompt is %d tokens; at most %d (--max-prompt-tokens)", len(p.tokens), a.s.cfg.maxTokens)}
	}
	rec, err := a.s.commitDecision(ctx, p, r.RetryOf, r.Exclude)
	if err != nil {
		return door.Decision{}, doorError(err)
	}
	d := door.Decision{DecisionID: rec.GetDecisionId(), RequestID: rec.GetRequestId(), Remote: rec.GetMode() == "remote", Reason: rec.GetReason()}
	d.Decode = door.Worker{ID: rec.GetDecodeWorker().GetWorkerId(), HTTPURL: a.httpURL(rec.GetDecodeWorker().GetWorkerId())}
	if d.Remote {
		d.Prefill = door.Worker{ID: rec.GetPrefillWorker().GetWorkerId(), HTTPURL: a.httpURL(rec.GetPrefillWorker().GetWorkerId())}
	}
	return d, nil
}

// HTTPURLState is a State that answers a worker's registered http_url by
// itself, with one lookup: the door asks on every request, and listing the
// fleet (Workers builds every worker's status) would cost a request time
// in proportion to the fleet. StoreState implements it.
type HTTPURLState interface {
	HTTPURL(workerID string) string
}

// httpURL is the registered http_url of worker id ("" when none).
func (a doorDeps) httpURL(id string) string {
	if hs, ok := a.s.deps.State.(HTTPURLState); ok {
		return hs.HTTPURL(id)
	}
	for _, w := range a.s.deps.State.Workers() {
		if w.WorkerID == id && w.HTTPURL != "" {
			return w.HTTPURL
		}
	}
	return ""
}

// WorkersVersionState is a State that versions its worker list (see
// statestore's View.WorkersVersion): the door's model and tokenizer lookups
// then keep an index built once per version, instead of listing the whole
// fleet (Workers builds every worker's status) on every request.
// StoreState implements it.
type WorkersVersionState interface {
	WorkersVersion() uint64
}

// fleetIndex is what the door looks up of the registrations, indexed at
// one version of the worker list.
type fleetIndex struct {
	cur atomic.Pointer[fleetView]
}

type fleetView struct {
	version uint64
	// tokenizers maps a model to its decode workers' http_urls, by worker
	// id and rank, each once.
	tokenizers map[string][]string
	// models are the served models, sorted.
	models []string
}

// view is the index of the current worker list: the one built last when
// the state's version has not changed since, else a new one. Without
// WorkersVersionState every call builds one.
func (a doorDeps) view() *fleetView {
	vs, versioned := a.s.deps.State.(WorkersVersionState)
	var version uint64
	if versioned {
		// Read before the list: a list newer than its version is built
		// again at the next call, never kept past a change.
		version = vs.WorkersVersion()
		if v := a.fleet.cur.Load(); v != nil && v.version == version {
			return v
		}
	}
	v := buildFleetView(version, a.s.deps.State.Workers())
	if versioned {
		a.fleet.cur.Store(v)
	}
	return v
}

func buildFleetView(version uint64, ws []WorkerStatus) *fleetView {
	slices.SortFunc(ws, func(x, y WorkerStatus) int {
		if c := strings.Compare(x.WorkerID, y.WorkerID); c != 0 {
			return c
		}
		return int(x.DPRank) - int(y.DPRank)
	})
	v := &fleetView{version: version, tokenizers: map[string][]string{}}
	type modelURL struct{ model, url string }
	models, urls := map[string]bool{}, map[modelURL]bool{}
	for _, w := range ws {
		if !models[w.Model] {
			models[w.Model] = true
			v.models = append(v.models, w.Model)
		}
		if k := (modelURL{w.Model, w.HTTPURL}); w.Pool == string(decider.PoolDecode) && w.HTTPURL != "" && !urls[k] {
			urls[k] = true
			v.tokenizers[w.Model] = append(v.tokenizers[w.Model], w.HTTPURL)
		}
	}
	slices.Sort(v.models)
	return v
}

// Tokenizers implements door.Fleet: the model's decode workers' http_urls,
// by worker id. The slice is the index's: the door only reads it.
func (a doorDeps) Tokenizers(model string) []string { return a.view().tokenizers[model] }

// Models implements door.Fleet.
func (a doorDeps) Models() []string { return slices.Clone(a.view().models) }

var doorOutcomeKinds = map[door.OutcomeKind]pb.OutcomeEvent_Kind{
	door.PrefillDone: pb.OutcomeEvent_KIND_PREFILL_DONE,
	door.Completed:   pb.OutcomeEvent_KIND_COMPLETED,
	door.Cancelled:   pb.OutcomeEvent_KIND_CANCELLED,
}

// AppendOutcome implements door.Outcomes.
func (a doorDeps) AppendOutcome(ctx context.Context, o door.Outcome) error {
	ev, err := a.s.outcomeEvent(o.RequestID, doorOutcomeKinds[o.Kind])
	if err != nil {
		return err
	}
	if ev.GetDecisionId() != o.DecisionID {
		return fmt.Errorf("request %s: the replica holds decision %s, not %s", o.RequestID, ev.GetDecisionId(), o.DecisionID)
	}
	ev.TtftMs, ev.ItlMsMean, ev.OutputTokens, ev.ErrorCode = millis(o.TTFT), millis(o.ITLMean), o.OutputTokens, o.ErrorCode
	r, err := events.NewRecord(a.s.deps.Names, outcomeKey(ev), ev)
	if err != nil {
		return err
	}
	pos, err := a.s.deps.Log.Append(ctx, a.s.withDelta([]*kgoRecord{r}, ev)...)
	if err != nil {
		return err
	}
	a.s.own.note(pos)
	return nil
}

// Unreachable implements door.Health: a connect_refused WorkerHealth
// record, written like every record (validated, keyed by the worker, on
// the load topic). The worker's health changes when a replica applies it.
func (a doorDeps) Unreachable(ctx context.Context, workerID, detail string) error {
	h := &pb.WorkerHealth{WorkerId: workerID, Reason: pb.HealthReason_HEALTH_REASON_CONNECT_REFUSED, Source: pb.HealthSource_HEALTH_SOURCE_DOOR,
		ObservedAtUnixNano: time.Now().UnixNano(), Detail: textcut.Truncate(strings.ToValidUTF8(detail, "?"), events.MaxHealthDetailLen),
		Observer: textcut.Truncate(a.s.cfg.replicaID, events.MaxHealthDetailLen)}
	r, err := events.NewRecord(a.s.deps.Names, events.WorkerKey(workerID), h)
	if err != nil {
		return err
	}
	_, err = a.s.deps.Log.Append(ctx, r)
	return err
}

func millis(d *time.Duration) *float64 {
	if d == nil {
		return nil
	}
	v := float64(*d) / float64(time.Millisecond)
	return &v
}

// doorError answers an API error in OpenAI's shape. OpenAI answers an
// unknown model 404 model_not_found; the rest keep their status and code.
func doorError(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	out := &door.Error{Status: e.Status, Type: "invalid_request_error", Code: e.Code, Param: e.Field, Message: e.Message, RetryAfter: e.RetryAfter}
	switch {
	case e.Code == "unknown_model":
		out.Status, out.Code = http.StatusNotFound, "model_not_found"
	case e.Status >= 500:
		out.Type = "server_error"
	case e.Status == http.StatusUnprocessableEntity:
		out.Status = http.StatusBadRequest
	}
	return out
}

// excludingView is a decider view in which some workers are unavailable:
// a retry's decision must not pick the workers that just failed. Workers
// keep their index (the decider's WorkerRef), only their Unavailable flag
// changes, so the candidate table records them as excluded.
type excludingView struct {
	decider.View
	ids []string
	ws  []decider.WorkerInfo
}

func (e *excludingView) Workers() []decider.WorkerInfo {
	if e.ws == nil {
		e.ws = slices.Clone(e.View.Workers())
		for i := range e.ws {
			if id, _, _ := events.ParseWorkerRank(e.ws[i].ID); slices.Contains(e.ids, id) {
				e.ws[i].Unavailable = true
			}
		}
	}
	return e.ws
}
