package sim

import (
	"context"
	"time"
)

// Decision is what the driver needs from a routing decision.
type Decision struct {
	// Mode is "local" (prefill on the decode worker) or "remote".
	Mode string
	// DecisionID is the router's id of the decision, when it names one.
	DecisionID    string
	DecodeWorker  string
	PrefillWorker string
	Reason        string
	// CachedTokens and EffectiveISL are the router's estimates, for the report.
	CachedTokens int64
	EffectiveISL int64
}

// Decision modes, as the API returns them.
const (
	ModeLocal  = "local"
	ModeRemote = "remote"
)

// Router is what the driver routes through: the live API over HTTP, or the decider
// in-process. Route is called on the simulation goroutine and must answer before the
// request can start; the lifecycle reports may be asynchronous.
type Router interface {
	// Route decides for a request whose prompt is tokens.
	Route(ctx context.Context, r *Request, tokens []uint32) (Decision, error)
	// PrefillDone reports the request's first token.
	PrefillDone(ctx context.Context, r *Request, ttft time.Duration)
	// Completed reports the request's end: tokens generated and mean inter-token latency.
	Completed(ctx context.Context, r *Request, outputTokens int, itlMean time.Duration)
}

// fleetAware routers read the fleet's engines (the in-process router's exact view).
type fleetAware interface {
	attach(f *Fleet)
}
