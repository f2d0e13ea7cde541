package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/pdrouter/pdrouter/internal/rejects"
)

// RunConfig configures a live run against a router.
type RunConfig struct {
	// RouterURL is the API's base URL (http://127.0.0.1:8080).
	RouterURL string
	// AuthToken is sent as a bearer token when set.
	AuthToken string
	Fleet     FleetConfig
	// TimeScale is simulated seconds per wall second: 10 replays an hour-long trace
	// in six minutes. Engines, transfers and arrivals all run on the simulated clock;
	// the router's processing (HTTP, Kafka, ingest) takes real time, so at a high
	// scale the router's view lags the engines by scale × its real lag.
	TimeScale float64
	// Wire is the KV event encoding (map by default).
	Wire WireFormat
	// Host is the address engines bind their ZMQ and metrics sockets on and
	// advertise in their registrations (default 127.0.0.1).
	Host string
	// Topic is the ZMQ topic frame each engine sends ("" as vLLM's default).
	Topic string
	// ReadyTimeout bounds the wait for the router to list the registered workers
	// (default 30 s).
	ReadyTimeout time.Duration
	// Progress is the wall interval of progress log lines (default 5 s; < 0: none).
	Progress time.Duration
	// Label names the run in the report.
	Label string
	// KeepServing keeps the engines' sockets, /metrics and OpenAI API up after the
	// report until ctx ends, so the router keeps seeing live (idle) workers and an
	// OpenAI client keeps getting answers: `pdrouter dev` leaves everything running
	// for the user to query.
	KeepServing bool
	// KVHoldTimeout is how long (simulated time) a prefill engine holds a prompt's
	// KV for a decode engine to pull (default DefaultKVHoldTimeout, vLLM's).
	KVHoldTimeout time.Duration
	// MaxBodyBytes bounds a request body on the engines' API (default
	// DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// OpenAIBaseURL, when set, sends the workload through this OpenAI base URL
	// (RunViaOpenAI; e.g. the router's door, http://127.0.0.1:8080/v1) instead of
	// routing each request with POST /v1/route: the engines only serve their API,
	// and whoever answers at the URL places the requests.
	OpenAIBaseURL string
}

// RunDeps are RunFleet's collaborators.
type RunDeps struct {
	Log *slog.Logger
	// HTTPClient talks to the router (default: 30 s timeout).
	HTTPClient *http.Client
	// OnReady is called once the workers are registered and listed, with the
	// engines' registrations (endpoints included).
	OnReady func([]WorkerRegistration)
	// OnReport is called with the report as soon as the workload is done, before
	// RunFleet waits for ctx when KeepServing is set.
	OnReport func(*Report)
	// Rejects counts requests the engines' APIs refuse (entry sim_http); nil
	// counts into a counter exported nowhere.
	Rejects *rejects.Counter
}

func (c *RunConfig) defaults() {
	if c.TimeScale <= 0 {
		c.TimeScale = 1
	}
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = 30 * time.Second
	}
	if c.Progress == 0 {
		c.Progress = 5 * time.Second
	}
	if c.Label == "" {
		c.Label = "live " + c.RouterURL
		if c.OpenAIBaseURL != "" {
			c.Label = "live via " + c.OpenAIBaseURL
		}
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
}

// RunFleet starts the fleet's engines on real sockets (a ZMQ PUB and replay ROUTER
// per engine, publishing vLLM's bytes, and an HTTP listener serving vLLM's
// OpenAI-compatible API and /metrics, engineserver.go), registers them with
// the router at cfg.RouterURL (so its ingest subscribes and scrapes them), waits until
// the router lists them, then replays the workload in scaled time: each request is
// routed with POST /v1/route, the engines obey the decision, and lifecycle events are
// posted as requests reach their first token and complete. Requests that reach an
// engine's API join the same simulation at their wall arrival (live.go,
// external.go), before, during and (with KeepServing) after the workload. It logs
// progress and returns the report. `pdrouter dev` calls it in-process with its own API's URL.
func RunFleet(ctx context.Context, cfg RunConfig, w *Workload, deps RunDeps) (*Report, error) {
	cfg.defaults()
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fc := cfg.Fleet
	fc.defaults()
	if cfg.OpenAIBaseURL != "" {
		if u, err := url.Parse(cfg.OpenAIBaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("OpenAI base URL %q: want http://host:port/v1", cfg.OpenAIBaseURL)
		}
	}
	hr, err := NewHTTPRouter(cfg.RouterURL, cfg.AuthToken, fc.Hardware.ModelName, deps.HTTPClient, log)
	if err != nil {
		return nil, err
	}
	defer hr.Close()
	f, err := NewFleet(fc, hr, log)
	if err != nil {
		return nil, err
	}
	live := newLiveLoop(cfg.TimeScale)
	f.live, f.kvHold = live, cfg.KVHoldTimeout
	rj := deps.Rejects
	if rj == nil {
		rj = rejects.For(nil)
	}
	rj.Init(rejects.SimHTTP, engineRejectReasons...)
	var closers []func() error
	defer func() {
		// Handlers waiting on the loop give up first, so that the servers can close.
		live.stop()
		for _, c := range closers {
			_ = c()
		}
	}()
	var regs []WorkerRegistration
	var ids []string
	for _, e := range f.engines {
		ec := e.cfg
		pub, err := StartPublisher(PublisherConfig{Endpoint: "tcp://" + net.JoinHostPort(cfg.Host, "0"),
			ReplayEndpoint: "tcp://" + net.JoinHostPort(cfg.Host, "0"), Topic: cfg.Topic, Format: cfg.Wire})
		if err != nil {
			return nil, err
		}
		closers = append(closers, pub.Close)
		es, err := f.serveAPI(e, pub, live, cfg.Host, cfg.MaxBodyBytes, rj, log)
		if err != nil {
			return nil, err
		}
		closers = append(closers, es.Close)
		reg := WorkerRegistration{WorkerID: ec.ID, Pool: string(ec.Pool), Model: ec.Model, BlockSize: ec.BlockSize,
			TotalKVBlocks: ec.NumBlocks, MaxNumBatchedTokens: ec.MaxBatchedTokens,
			KVEventsEndpoint: pub.Endpoint(), KVReplayEndpoint: pub.ReplayEndpoint(), KVEventsTopic: cfg.Topic,
			MetricsURL: es.URL() + "/metrics", HTTPURL: es.URL(), Engine: "sim"}
		if err := hr.Register(ctx, reg); err != nil {
			return nil, fmt.Errorf("register %s with %s: %w", ec.ID, cfg.RouterURL, err)
		}
		regs = append(regs, reg)
		ids = append(ids, ec.ID)
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	err = hr.WaitWorkers(rctx, ids)
	cancel()
	if err != nil {
		return nil, err
	}
	log.Info("sim fleet registered", "router", cfg.RouterURL, "prefill", fc.Prefill, "decode", fc.Decode,
		"requests", len(w.Requests), "trace_span", w.Duration().Round(time.Second), "time_scale", cfg.TimeScale,
		"expected_wall", (time.Duration(float64(w.Duration()) / cfg.TimeScale)).Round(time.Second))
	if deps.OnReady != nil {
		deps.OnReady(regs)
	}
	start := time.Now()
	// Simulated time 0 is now: requests that reached the engines while they
	// registered waited on the loop, and enter at time 0.
	live.start = start
	f.wallTS = func() float64 { return float64(time.Now().UnixNano()) / 1e9 }
	if cfg.Progress > 0 {
		f.progress = cfg.Progress
	}
	var (
		rep    *Report
		runErr error
	)
	if cfg.OpenAIBaseURL != "" {
		// The loop only serves the engines' API while the client drives, and
		// samples the queues meanwhile.
		f.driven = true
		f.q.at(0, f.sample)
		lctx, lcancel := context.WithCancel(ctx)
		loopDone := make(chan struct{})
		go func() { defer close(loopDone); f.serve(lctx) }()
		rep, runErr = RunViaOpenAI(ctx, OpenAIRunConfig{BaseURL: cfg.OpenAIBaseURL, Model: fc.Hardware.ModelName,
			AuthToken: cfg.AuthToken, TimeScale: cfg.TimeScale, SLO: fc.SLO, Label: cfg.Label}, w, nil, log)
		lcancel()
		<-loopDone
		// The loop has stopped: its state is this goroutine's to read.
		f.driven = false
		if rep != nil {
			f.viaAPIReport(rep)
		}
	} else {
		rep, runErr = f.Run(ctx, w, cfg.Label)
	}
	hr.Close()
	sent, failed := hr.LifecycleStats()
	log.Info("sim run finished", "wall", time.Since(start).Round(time.Millisecond), "completed", rep.Completed,
		"failed", rep.Failed, "lifecycle_sent", sent, "lifecycle_failed", failed)
	if deps.OnReport != nil {
		deps.OnReport(rep)
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) && !errors.Is(runErr, context.DeadlineExceeded) {
		return rep, runErr
	}
	if cfg.KeepServing && ctx.Err() == nil {
		log.Info("sim engines idle and still serving their sockets and OpenAI API; Ctrl-C to stop")
		f.serve(ctx)
	}
	return rep, nil
}
