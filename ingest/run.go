package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/rejects"
)

// Deps are Run's collaborators, passed in so `pdrouter ingest`, `dev` and
// `serve --ingest` can share a Kafka client, a registry and a logger.
type Deps struct {
	// Kafka is the client records are written with (and the workers topic
	// read with, when Config.WatchWorkers). Run does not close it. It must
	// keep franz-go's delivery defaults (see KafkaSink).
	Kafka *kgo.Client
	// KafkaOpts are the connection options, for the workers-topic consumer
	// (Config.WatchWorkers).
	KafkaOpts []kgo.Opt
	// Sink overrides the Kafka sink (tests).
	Sink Sink
	// Registerer receives ingest's metrics (nil: not registered).
	Registerer prometheus.Registerer
	Log        *slog.Logger
	// Replayer overrides the ZMQ replay client (tests).
	Replayer Replayer
	// HTTP is the client for scraping engines' /metrics (default: one that
	// connects only where Config.EngineAllow allows, and follows no
	// redirect). Each scrape is bounded by Config.ScrapeTimeout.
	HTTP *http.Client
	// BindReady is called with the bound address once the Bind endpoint
	// listens (useful with port 0).
	BindReady func(addr string)
}

// Run ingests until ctx ends or a record can no longer be written. It
// returns nil on a clean stop (after flushing what was produced), and the
// error that stopped it otherwise.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	ing, err := New(cfg, deps)
	if err != nil {
		return err
	}
	return ing.Run(ctx)
}

// Ingest is a running ingest: its sources can be changed while it runs
// (registrations on the workers topic do that).
type Ingest struct {
	cfg     Config
	deps    Deps
	sdeps   sourceDeps
	kafka   *KafkaSink
	metrics *Metrics
	guard   *connGuard
	log     *slog.Logger
	allow   *AllowList

	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	running  map[string]*runningSource // by worker id
	regs     map[string]*pb.WorkerRegistration
	bindTops map[string]SourceConfig // topic -> engine that connects to Bind
	refusals map[string]bool         // refused endpoints already logged

	scrapeHealth scrapeHealth // the scraper's health rule (health.go)
}

type runningSource struct {
	cfg    SourceConfig
	cancel context.CancelFunc
	done   chan struct{}
}

// New checks cfg and builds an Ingest; Run starts it.
func New(cfg Config, deps Deps) (*Ingest, error) {
	cfg.defaults()
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	allow, err := ParseAllowList(cfg.EngineAllow)
	if err != nil {
		return nil, err
	}
	if deps.HTTP == nil {
		deps.HTTP = newScrapeClient(allow)
	}
	if err := cfg.ZMTP.Validate(); err != nil {
		return nil, err
	}
	if cfg.Bind != "" {
		if err := checkEndpoint("--bind", cfg.Bind); err != nil {
			return nil, err
		}
	}
	for i, s := range cfg.Sources {
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("sources[%d]: %w", i, err)
		}
	}
	if cfg.MaxRecordBytes > events.MaxValueBytes {
		return nil, fmt.Errorf("ingest: max record bytes %d is over %d, the largest record pdrouter reads", cfg.MaxRecordBytes, events.MaxValueBytes)
	}
	ing := &Ingest{cfg: cfg, deps: deps, log: deps.Log, metrics: NewMetrics(deps.Registerer), allow: allow,
		running: map[string]*runningSource{}, regs: map[string]*pb.WorkerRegistration{}, bindTops: map[string]SourceConfig{},
		refusals: map[string]bool{}}
	ing.metrics.SetMaxSourceLabels(cfg.MaxSourceLabels)
	ing.guard = newConnGuard(cfg.ZMTP, rejects.For(deps.Registerer), ing.metrics.ConnPanics, deps.Log)
	if deps.Replayer == nil {
		deps.Replayer = ZMQReplayer{guard: ing.guard}
		ing.deps.Replayer = deps.Replayer
	}
	sink := deps.Sink
	if sink == nil {
		if deps.Kafka == nil {
			return nil, errors.New("ingest: no Kafka client and no sink")
		}
		ing.kafka = NewKafkaSink(deps.Kafka, cfg.Names, ing.metrics, deps.Log)
		ing.kafka.MaxRecordBytes = cfg.MaxRecordBytes
		sink = ing.kafka
	}
	if cfg.WatchWorkers && len(deps.KafkaOpts) == 0 {
		return nil, errors.New("ingest: following the workers topic needs Kafka connection options")
	}
	ing.sdeps = sourceDeps{sink: sink, replayer: allowReplayer{ing: ing, inner: deps.Replayer}, metrics: ing.metrics, log: deps.Log,
		ingestID: cfg.IngestID, replayTimeout: cfg.ReplayTimeout}
	return ing, nil
}

// Metrics returns ingest's metrics (for tests and embedding).
func (ing *Ingest) Metrics() *Metrics { return ing.metrics }

// Run runs until ctx ends or a fatal error.
func (ing *Ingest) Run(ctx context.Context) error {
	ing.ctx, ing.cancel = context.WithCancelCause(ctx)
	defer ing.cancel(nil)
	for _, s := range ing.cfg.Sources {
		ing.Upsert(s)
	}
	if ing.cfg.Bind != "" {
		ing.goFatal(func() error { return ing.runBind(ing.ctx) })
	}
	if ing.cfg.WatchWorkers {
		ing.goFatal(func() error { return ing.watchWorkers(ing.ctx) })
	}
	if ing.cfg.ScrapeInterval > 0 {
		ing.goFatal(func() error { return ing.runScraper(ing.ctx) })
	}
	<-ing.ctx.Done()
	ing.wg.Wait()
	cause := context.Cause(ing.ctx)
	if ing.kafka != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := ing.kafka.Flush(fctx); err != nil && (cause == nil || errors.Is(cause, ctx.Err())) {
			cause = err
		}
	}
	if cause == nil || (ctx.Err() != nil && errors.Is(cause, ctx.Err())) {
		return nil
	}
	return cause
}

// goFatal runs fn; an error from it stops the whole ingest.
func (ing *Ingest) goFatal(fn func() error) {
	ing.wg.Add(1)
	go func() {
		defer ing.wg.Done()
		if err := fn(); err != nil && ing.ctx.Err() == nil {
			ing.cancel(err)
		}
	}()
}

// Upsert starts ingesting a source, or restarts it if its description
// changed. An identical description is a no-op, so re-reading the
// compacted workers topic does not reconnect anything.
func (ing *Ingest) Upsert(s SourceConfig) {
	if err := s.Validate(); err != nil {
		ing.log.Warn("ignoring an invalid source", "worker", s.WorkerID, "err", err)
		return
	}
	ing.mu.Lock()
	defer ing.mu.Unlock()
	if old, ok := ing.running[s.WorkerID]; ok {
		if old.cfg == s {
			return
		}
		old.cancel()
		<-old.done
		delete(ing.running, s.WorkerID)
	}
	delete(ing.bindTops, ing.topicOf(s.WorkerID))
	if s.Endpoint == "" {
		ing.bindTops[s.Topic] = s
		ing.running[s.WorkerID] = &runningSource{cfg: s, cancel: func() {}, done: closedChan()}
		return
	}
	specs, err := s.specs()
	if err != nil {
		ing.log.Warn("ignoring a source", "worker", s.WorkerID, "err", err)
		return
	}
	ctx, cancel := context.WithCancel(ing.ctx)
	rs := &runningSource{cfg: s, cancel: cancel, done: make(chan struct{})}
	ing.running[s.WorkerID] = rs
	var wg sync.WaitGroup
	for _, spec := range specs {
		wg.Add(1)
		ing.goFatal(func() error {
			defer wg.Done()
			return ing.runConnect(ctx, spec, s.Topic)
		})
	}
	go func() { wg.Wait(); close(rs.done) }()
	ing.log.Info("ingesting", "worker", s.WorkerID, "endpoint", s.Endpoint, "dp_size", max(s.DPSize, 1), "replay", s.Replay)
}

func (ing *Ingest) topicOf(worker string) string {
	for t, s := range ing.bindTops {
		if s.WorkerID == worker {
			return t
		}
	}
	return "\x00none"
}

// Remove stops ingesting a worker's sources (a tombstone on workers).
func (ing *Ingest) Remove(worker string) {
	ing.mu.Lock()
	defer ing.mu.Unlock()
	if old, ok := ing.running[worker]; ok {
		old.cancel()
		<-old.done
		delete(ing.running, worker)
		delete(ing.bindTops, ing.topicOf(worker))
		ing.log.Info("stopped ingesting", "worker", worker)
	}
}

// Sources returns the current source descriptions.
func (ing *Ingest) Sources() []SourceConfig {
	ing.mu.Lock()
	defer ing.mu.Unlock()
	out := make([]SourceConfig, 0, len(ing.running))
	for _, r := range ing.running {
		out = append(out, r.cfg)
	}
	return out
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// runConnect ingests one engine rank in connect mode: a reader goroutine
// decodes into a bounded queue, this goroutine sequences and writes.
func (ing *Ingest) runConnect(ctx context.Context, spec sourceSpec, topic string) error {
	dial, ok := ing.dialable(ctx, spec)
	if !ok {
		return nil
	}
	src := newSource(spec, ing.sdeps)
	q := make(chan inbound, ing.cfg.QueueSize)
	depth := ing.metrics.QueueDepth.WithLabelValues(spec.Endpoint)
	defer ing.metrics.QueueDepth.DeleteLabelValues(spec.Endpoint)
	rctx, stopReader := context.WithCancel(ctx)
	readerDone := make(chan error, 1)
	go func() {
		readerDone <- subscribeConnect(rctx, dial, topic, ing.cfg.ReconnectInterval, ing.guard,
			func(r received) error {
				in := decodeInbound(r, spec.Engine)
				select {
				case q <- in:
					depth.Inc()
					return nil
				case <-rctx.Done():
					return rctx.Err()
				}
			}, ing.frameError,
			func() error {
				select {
				case q <- inbound{reconnected: true}:
					depth.Inc()
					return nil
				case <-rctx.Done():
					return rctx.Err()
				}
			})
	}()
	defer func() { stopReader(); <-readerDone }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case in := <-q:
			depth.Dec()
			if err := src.handle(ctx, in); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("ingest: source %s (%s): %w", src.label, spec.Endpoint, err)
			}
		}
	}
}

// dialable resolves spec's endpoint to the checked address to dial, or
// refuses it (ok=false: the source does not run). A name that does not
// resolve yet is retried every ReconnectInterval, as a refused connection
// is.
func (ing *Ingest) dialable(ctx context.Context, spec sourceSpec) (string, bool) {
	for failures := 0; ; failures++ {
		ep, err := ing.allow.resolve(ctx, spec.Endpoint)
		switch {
		case err == nil:
			return ep, true
		case errors.Is(err, ErrNotAllowed):
			ing.metrics.Rejects.Inc(rejects.ZMQDial, rejectNotAllowed)
			ing.refusedOnce(spec.Worker, "kv_events_endpoint "+spec.Endpoint, err)
			return "", false
		case ctx.Err() != nil:
			return "", false
		}
		if failures == 0 {
			ing.log.Warn("cannot resolve engine publisher; retrying", "worker", spec.Worker, "endpoint", spec.Endpoint, "err", err)
		}
		sleepCtx(ctx, ing.cfg.ReconnectInterval)
	}
}

func (ing *Ingest) frameError(err error) {
	ing.metrics.FrameErrors.Inc()
	ing.log.Debug("badly framed ZMQ message", "err", err)
}

// bindKey identifies a publisher on the bind endpoint.
type bindKey struct {
	topic string
	rank  uint32
}

// runBind reads the bind endpoint and dispatches messages to one source
// per (topic, dp rank), each with its own goroutine and bounded queue.
func (ing *Ingest) runBind(ctx context.Context) error {
	type bound struct {
		q   chan inbound
		eng pb.Engine
	}
	sources := map[bindKey]*bound{}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	depth := ing.metrics.QueueDepth.WithLabelValues(ing.cfg.Bind)
	dispatch := func(r received) error {
		topic := string(r.msg.Topic)
		sc, known := ing.bindSource(topic)
		if !known {
			ing.refuseBind(topic, 0, false)
			return nil
		}
		eng, _ := ParseEngine(sc.Engine)
		in := decodeInbound(r, eng)
		key := bindKey{topic: topic}
		if in.batch != nil && in.batch.HasDPRank {
			key.rank = in.batch.DPRank
		}
		if !rankRegistered(sc, key.rank) {
			ing.refuseBind(topic, key.rank, true)
			return nil
		}
		b, ok := sources[key]
		if !ok {
			replay, err := OffsetEndpoint(sc.Replay, int(key.rank))
			if err != nil {
				replay = ""
			}
			spec := sourceSpec{Worker: sc.WorkerID, DPRank: key.rank, Engine: eng, Endpoint: ing.cfg.Bind, Replay: replay}
			src := newSource(spec, ing.sdeps)
			b = &bound{q: make(chan inbound, ing.cfg.QueueSize), eng: eng}
			sources[key] = b
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-ctx.Done():
						return
					case in := <-b.q:
						depth.Dec()
						if err := src.handle(ctx, in); err != nil {
							if ctx.Err() == nil {
								cancel(fmt.Errorf("ingest: source %s (bind %s): %w", src.label, ing.cfg.Bind, err))
							}
							return
						}
					}
				}
			}()
		}
		select {
		case b.q <- in:
			depth.Inc()
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	err := subscribeBind(ctx, ing.cfg.Bind, ing.cfg.BindTopic, ing.guard, dispatch, ing.frameError, ing.deps.BindReady)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// rankRegistered reports whether rank is one the registration covers:
// below its dp_size, or, when it gives none, below the largest dp_size a
// registration may give (the rank is in the engine's batch, and a source
// per rank is a goroutine and a queue).
func rankRegistered(sc SourceConfig, rank uint32) bool {
	if sc.DPSize > 0 {
		return rank < uint32(sc.DPSize)
	}
	return rank < maxDPSize
}

// refuseBind counts and logs a message on the bind endpoint that names no
// registered worker (or rank). The topic is the peer's choice: it is
// logged shortened, and through refusedOnce, whose memory is bounded.
func (ing *Ingest) refuseBind(topic string, rank uint32, known bool) {
	ing.metrics.Unrouted.Inc()
	ing.metrics.Rejects.Inc(rejects.ZMQBind, rejectUnknown)
	const show = 64
	if len(topic) > show {
		topic = topic[:show] + "…"
	}
	what := fmt.Sprintf("topic %q", topic)
	if known {
		what = fmt.Sprintf("topic %q rank %d", topic, rank)
	}
	ing.logOnce("bind\x00"+what, "message on the bind endpoint for no registered worker: dropped", "what", what, "bind", ing.cfg.Bind)
}

func (ing *Ingest) bindSource(topic string) (SourceConfig, bool) {
	ing.mu.Lock()
	defer ing.mu.Unlock()
	s, ok := ing.bindTops[topic]
	return s, ok
}
