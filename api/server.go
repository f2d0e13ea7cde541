package api

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/door"
	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/rejects"
	"github.com/pdrouter/pdrouter/internal/ulid"
)

// Deps are the parts a Server is built from.
type Deps struct {
	// State is the replica's state. It may also have the optional
	// capabilities DecisionExpecter and PositionedDecisionRecorder
	// (state.go), which New looks for once.
	State   State
	Decider *decider.Decider
	Log     EventLog
	Names   events.Names
	// Snapshot, when set, serves a snapshot of the store at
	// GET /v1/state/snapshot, for new replicas to bootstrap from.
	Snapshot http.Handler
	// Records reads whole decision records from the decisions topic, for
	// GET /v1/decisions, explain and ?explain=true replays of decisions
	// the state holds as headers, and searches the topic for decisions
	// the state does not hold (decisionsearch.go). Without it the former
	// answer 503, the latter 404.
	Records DecisionReader
	// Started, when set, holds the answers that read the log's content
	// (routes, lifecycle events, decisions, HTTP ingest) and /readyz at
	// 503 not_ready until the state has caught up with the log as of the
	// replica's start (CatchUp). Nil: the state is taken as caught up.
	Started StartGate
}

// Server is the HTTP API. Build it with New and serve Handler().
type Server struct {
	deps    Deps
	cfg     config
	metrics *metrics
	// deltaMet: the load deltas this server writes (loaddeltas.go).
	deltaMet deltaMetrics
	// rejects counts refused requests (refusals.go).
	rejects *rejects.Counter
	// forwards counts forwarded lifecycle events by result (forwards.go).
	forwards *prometheus.CounterVec
	engine   *gin.Engine
	// decisions reuses decider.Decision values (and their scratch memory)
	// across requests, so the hot path does not allocate per worker.
	decisions sync.Pool
	// inflight serializes concurrent routes of one request_id, so a retried
	// request never gets two decisions from this replica.
	inflight keyedMutex
	// configOnce renders configJSONText (route.go configJSON).
	configOnce     sync.Once
	configJSONText string
	// routeJSON writes POST /v1/route's answers (routewrite.go).
	routeJSON
	// expecter and recordAt are deps.State's optional capabilities
	// (state.go), nil when it lacks them.
	expecter DecisionExpecter
	recordAt PositionedDecisionRecorder
	// own is this server's registrations, which HTTP ingest waits for
	// (ownwrites.go).
	own ownWrites
	// door is the OpenAI front door, nil unless WithDoor.
	door *door.Door
	// searchSlots holds a token per running search of the decisions topic
	// (decisionsearch.go); its capacity is DecisionSearch.Concurrent.
	searchSlots chan struct{}
}

// New builds a Server.
func New(deps Deps, opts ...Option) (*Server, error) {
	if deps.State == nil || deps.Decider == nil || deps.Log == nil {
		return nil, errors.New("api: State, Decider and Log are required")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.budget.validate(); err != nil {
		return nil, err
	}
	search, err := cfg.search.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.search = search
	if cfg.newID == nil {
		cfg.newID = func() string { return ulid.New(cfg.now()) }
		cfg.newDecisionID = ulid.New
	} else {
		gen := cfg.newID
		cfg.newDecisionID = func(time.Time) string { return gen() }
	}
	if cfg.registerer == nil {
		r := prometheus.NewRegistry()
		cfg.registerer, cfg.gatherer = r, r
	}
	s := &Server{deps: deps, cfg: cfg, metrics: newMetrics(cfg.registerer), deltaMet: newDeltaMetrics(cfg.registerer), rejects: rejects.For(cfg.registerer),
		forwards: newForwardMetrics(cfg.registerer)}
	s.metrics.initDecisions(deps.Decider.Config().Disagg.Policy)
	s.rejects.Init(rejects.HTTP, httpRefusals...)
	s.expecter, _ = deps.State.(DecisionExpecter)
	s.recordAt, _ = deps.State.(PositionedDecisionRecorder)
	s.decisions.New = func() any { return new(decider.Decision) }
	s.searchSlots = make(chan struct{}, cfg.search.Concurrent)
	if cfg.door != nil {
		opts := append([]door.Option{door.WithLogger(cfg.log), door.WithMetrics(cfg.registerer),
			door.WithIDGenerator(cfg.newID), door.WithMaxPromptTokens(cfg.maxTokens)}, cfg.door...)
		d, err := door.New(s.doorDeps(), opts...)
		if err != nil {
			return nil, err
		}
		s.door = d
	}
	s.engine = s.routes()
	return s, nil
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.engine }

func (s *Server) routes() *gin.Engine {
	// Gin's debug mode prints every route to stdout; pdrouter logs through
	// slog instead. The mode is process-wide in Gin, and release is the only
	// one pdrouter uses.
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.ContextWithFallback = true
	// Gin would answer a path one slash or one letter's case off with a
	// redirect of its own (an HTML body): such a path is not an endpoint,
	// and gets the JSON 404 like any other.
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	e.Use(s.recoverer, s.observe, s.limits)
	// Unknown paths and methods are behind the token too: without it, a
	// client learns nothing, not even which paths exist.
	e.NoRoute(s.auth, func(c *gin.Context) {
		fail(c, notFound("no_route", fmt.Sprintf("no endpoint %s %s; see /openapi.json", c.Request.Method, quoted(c.Request.URL.Path))))
	})
	e.NoMethod(s.auth, func(c *gin.Context) {
		fail(c, &Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Message: fmt.Sprintf("%s is not allowed on %s; see /openapi.json", c.Request.Method, quoted(c.Request.URL.Path))})
	})

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", gin.WrapH(promhttp.HandlerFor(s.cfg.gatherer, promhttp.HandlerOpts{})))
	e.GET("/openapi.json", s.openapi)

	v1 := e.Group("/v1", s.auth)
	v1.POST("/route", s.requireCaughtUp, s.route)
	v1.GET("/decisions/:id", s.requireCaughtUp, s.getDecision)
	v1.GET("/decisions/:id/explain", s.requireCaughtUp, s.explain)
	v1.POST("/requests/:id/events", s.requireCaughtUp, s.requestEvent)
	v1.POST("/workers", s.registerWorker)
	v1.DELETE("/workers/:id", s.deregisterWorker)
	v1.GET("/workers", s.listWorkers)
	v1.POST("/events/kv", s.requireCaughtUp, s.ingestKV)
	v1.POST("/events/load", s.requireCaughtUp, s.ingestLoad)
	v1.GET("/state", s.state)
	if s.door != nil {
		s.door.Mount(v1.Group("", s.requireCaughtUp))
	}
	if s.deps.Snapshot != nil {
		v1.GET("/state/snapshot", gin.WrapH(s.deps.Snapshot))
	}
	return e
}

// recoverer turns a panic into a 500 with the API's error body and logs it,
// so one bad request never takes the process down.
func (s *Server) recoverer(c *gin.Context) {
	defer func() {
		if r := recover(); r != nil {
			s.cfg.log.Error("panic in handler", "path", c.FullPath(), "panic", fmt.Sprint(r))
			fail(c, fmt.Errorf("panic: %v", r))
		}
	}()
	c.Next()
}

// observe records request metrics by route template (bounded), counts
// refusals and logs server errors.
func (s *Server) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	s.countRefusal(c)
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	code := c.Writer.Status()
	s.metrics.requests.WithLabelValues(route, c.Request.Method, strconv.Itoa(code)).Inc()
	s.metrics.requestSecs.WithLabelValues(route).Observe(time.Since(start).Seconds())
	for _, err := range c.Errors {
		s.cfg.log.Error("request failed", "route", route, "method", c.Request.Method, "status", code, "err", err.Err)
	}
}

// auth checks the bearer token in constant time.
func (s *Server) auth(c *gin.Context) {
	if s.cfg.authToken == "" {
		return
	}
	h := c.GetHeader("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.authToken)) != 1 {
		c.Header("WWW-Authenticate", `Bearer realm="pdrouter"`)
		fail(c, &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "send Authorization: Bearer <token>"})
	}
}

// keyedMutex is a mutex per key, created on demand and dropped when free.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
