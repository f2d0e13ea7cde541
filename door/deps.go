package door

import (
	"context"
	"time"
)

// Decider makes a routing decision and makes it durable before it returns
// (the API's decision path). A failure is returned as an *Error, which the
// door answers as it is.
type Decider interface {
	Decide(ctx context.Context, r DecideRequest) (Decision, error)
}

// DecideRequest is what a decision needs from an OpenAI request.
type DecideRequest struct {
	RequestID string
	Model     string
	TokenIDs  []uint32
	// MaxTokens is the expected output length (the request's max_tokens),
	// 0 when the request gives none.
	MaxTokens uint32
	// RetryOf is the decision this one retries ("" for a first decision);
	// Exclude names the workers that failed it, which the retry must not
	// pick.
	RetryOf string
	Exclude []string
}

// Decision is a decision as the door uses it.
type Decision struct {
	DecisionID string
	RequestID  string
	// Remote: prefill on Prefill, then decode on Decode; else Decode does
	// both.
	Remote bool
	// Reason is the decider's reason code (a fixed set, never input).
	Reason  string
	Decode  Worker
	Prefill Worker
}

// Worker is a picked worker and the base URL of its OpenAI server ("" when
// its registration has no http_url).
type Worker struct {
	ID      string
	HTTPURL string
}

// Fleet is what the door reads of the registered workers.
type Fleet interface {
	// Tokenizers returns the http_urls of the model's decode workers, in a
	// stable order: where the door asks /tokenize.
	Tokenizers(model string) []string
	// Models lists the served models, sorted.
	Models() []string
}

// OutcomeKind is a lifecycle event of the outcomes topic.
type OutcomeKind int

const (
	// PrefillDone frees the prefill worker's in-flight tokens.
	PrefillDone OutcomeKind = iota + 1
	// Completed frees the request's decode blocks.
	Completed
	// Cancelled ends a request that did not complete (an error or a
	// client that went away).
	Cancelled
)

// Outcome is one lifecycle event of a decided request, as measured at the
// door.
type Outcome struct {
	RequestID  string
	DecisionID string
	Kind       OutcomeKind
	// TTFT and ITLMean are absent (nil) when not measured.
	TTFT         *time.Duration
	ITLMean      *time.Duration
	OutputTokens *uint64
	// ErrorCode is a fixed code of the door for a request that did not
	// complete ("" otherwise).
	ErrorCode string
}

// Outcomes appends lifecycle events to the outcomes topic.
type Outcomes interface {
	AppendOutcome(ctx context.Context, o Outcome) error
}

// Health hears of workers the door could not connect to: the API writes
// each as a WorkerHealth record (connect_refused), which excludes the
// worker once a replica applies it.
type Health interface {
	Unreachable(ctx context.Context, workerID, detail string) error
}

// Deps are the parts a Door is built from. Health is optional.
type Deps struct {
	Decider  Decider
	Fleet    Fleet
	Outcomes Outcomes
	Health   Health
}
