package api

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/door"
)

// Option configures a Server.
type Option func(*config)

type config struct {
	log          *slog.Logger
	registerer   prometheus.Registerer
	gatherer     prometheus.Gatherer
	bodyLimit    int64
	maxTokens    int
	afterTimeout time.Duration
	authToken    string
	replicaID    string
	readyLag     int64
	now          func() time.Time
	newID        func() string
	// newDecisionID names a decision made at a time: by default a ULID of
	// that very time, the decided_at of its record, which is what lets a
	// decision no index holds be found on the decisions topic by its id
	// (decisionsearch.go).
	newDecisionID func(time.Time) string
	auditTimeout  time.Duration
	// readTimeout, maxHeaderBytes: httplimits.go.
	readTimeout    time.Duration
	maxHeaderBytes int
	maxAfter       int
	maxWorkers     int
	budget         recordBudget
	// search bounds the searches of the decisions topic for decisions the
	// state does not hold (decisionsearch.go).
	search DecisionSearch
	// loadDeltas: append a load delta with every decision and lifecycle
	// event (loaddeltas.go).
	loadDeltas bool
	// forwardEvents: forward lifecycle events for requests this replica
	// holds no decision for (forwards.go).
	forwardEvents bool
	// door, when set, serves the OpenAI front door with these options
	// (WithDoor).
	door []door.Option
}

func defaultConfig() config {
	return config{
		log:          slog.New(slog.DiscardHandler),
		bodyLimit:    16 << 20,
		maxTokens:    1 << 21,
		afterTimeout: 5 * time.Second,
		replicaID:    "router-0",
		readyLag:     1000,
		now:          time.Now,
		auditTimeout: 10 * time.Second,
		readTimeout:  30 * time.Second,
		// maxHeaderBytes: http.Server's default (1 MiB); pdrouter serve
		// sets its own --http-max-header-bytes.
		maxHeaderBytes: 1 << 20,
		maxAfter:       1024,
		maxWorkers:     4096,
		budget:         defaultRecordBudget(),
	}
}

// WithLogger sets the structured logger. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithMetrics registers the API's metrics on reg and serves /metrics from
// gather. Without it the API keeps its metrics on a private registry.
func WithMetrics(reg prometheus.Registerer, gather prometheus.Gatherer) Option {
	return func(c *config) { c.registerer, c.gatherer = reg, gather }
}

// WithBodyLimit caps every request body, in bytes (413 above it). Default
// 16 MiB: a 2M-token prompt as JSON token ids.
func WithBodyLimit(n int64) Option { return func(c *config) { c.bodyLimit = n } }

// WithMaxTokens caps the prompt length of /v1/route, in tokens (413 above
// it). Default 2,097,152.
func WithMaxTokens(n int) Option { return func(c *config) { c.maxTokens = n } }

// WithAfterTimeout bounds how long /v1/route waits for its `after` offsets
// before answering 504. Default 5 s.
func WithAfterTimeout(d time.Duration) Option { return func(c *config) { c.afterTimeout = d } }

// WithAuthToken requires "Authorization: Bearer <token>" on every endpoint
// but /healthz, /readyz and /metrics. The comparison is constant-time.
func WithAuthToken(token string) Option { return func(c *config) { c.authToken = token } }

// WithLoadDeltas makes the server append, with every decision and
// lifecycle event, its load delta on the load-deltas topic (loaddeltas.go),
// for peers that learn load from deltas (statestore.SourceLoadDeltas).
// Default off.
func WithLoadDeltas(on bool) Option { return func(c *config) { c.loadDeltas = on } }

// WithForwardEvents makes a lifecycle event for a request this replica
// holds no decision for go to the forwards topic (202, forwarded) instead
// of 404 unknown_request, for the replica that decided it to apply
// (forwards.go): what a replica of --load-deltas snapshots, which holds
// only its own requests, needs behind a balancer. Default off.
func WithForwardEvents(on bool) Option { return func(c *config) { c.forwardEvents = on } }

// WithReplicaID names this replica in the decisions it records.
func WithReplicaID(id string) Option { return func(c *config) { c.replicaID = id } }

// WithReadyLag is the total lag, in records, under which /readyz answers 200.
func WithReadyLag(n int64) Option { return func(c *config) { c.readyLag = n } }

// WithMaxWorkers caps the registered worker ids: a registration of a new id
// beyond it is answered 422 too_many_workers. Pass the state's cap
// (statestore.Options.MaxWorkers), which skips such registrations on apply
// anyway. Default 4096.
func WithMaxWorkers(n int) Option { return func(c *config) { c.maxWorkers = n } }

// WithAuditTimeout bounds how long a decision waits to be durable on the
// decisions topic before /v1/route answers 503. Default 10 s.
func WithAuditTimeout(d time.Duration) Option { return func(c *config) { c.auditTimeout = d } }

// WithClock replaces the wall clock that stamps event times on records the
// API writes (decided_at, outcome times). Decisions never read it.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithIDGenerator replaces the generator of request and decision ids
// (default: ULIDs). Every id it returns must be new: a generated request id
// is never looked up for an earlier decision. A decision whose id is not a
// ULID of its decided_at is found only while the replica's index holds it:
// GET /v1/decisions searches the decisions topic by the time in the id.
func WithIDGenerator(f func() string) Option { return func(c *config) { c.newID = f } }

// WithReadTimeout bounds the time from a request reaching the API to the
// last byte of its body (408 past it, or a closed connection when no answer
// can be sent). 0 disables it. Default 30 s.
func WithReadTimeout(d time.Duration) Option { return func(c *config) { c.readTimeout = d } }

// WithMaxHeaderBytes caps the request line and headers, in bytes (431
// headers_too_large above it). Default 1 MiB.
func WithMaxHeaderBytes(n int) Option { return func(c *config) { c.maxHeaderBytes = n } }

// WithMaxAfterPartitions caps the entries of a /v1/route `after` vector,
// topics and partitions together (422 above it). Default 1024.
func WithMaxAfterPartitions(n int) Option { return func(c *config) { c.maxAfter = n } }

// WithDecisionSearch bounds the searches of the decisions topic that
// GET /v1/decisions/{id} and its explain make for a decision the state does
// not hold (DecisionSearch; zero fields keep their defaults).
func WithDecisionSearch(d DecisionSearch) Option { return func(c *config) { c.search = d } }

// WithDoor serves the OpenAI-compatible front door (package door) on /v1:
// POST /v1/completions, POST /v1/chat/completions and GET /v1/models,
// behind the same authentication. The door gets the API's logger,
// registry, request id generator and --max-prompt-tokens first; opts come
// after them.
func WithDoor(opts ...door.Option) Option {
	return func(c *config) { c.door = append([]door.Option{}, opts...) }
}
