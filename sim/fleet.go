package sim

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/pdrouter/pdrouter/kvhash"
)

// SLO is the service level a request must meet to count toward goodput.
type SLO struct {
	TTFT time.Duration
	// ITL bounds the request's mean inter-token latency (its TPOT).
	ITL time.Duration
}

// DefaultSLO is TTFT ≤ 2 s and mean ITL ≤ 50 ms, a common interactive-chat target.
func DefaultSLO() SLO { return SLO{TTFT: 2 * time.Second, ITL: 50 * time.Millisecond} }

// FleetConfig describes a fleet of engines.
type FleetConfig struct {
	// Prefill and Decode are the pool sizes (default 2P2D; Prefill may be 0).
	Prefill, Decode int
	Hardware        Hardware
	// BlockSize, NumBlocks (0: sized from Hardware), MaxBatchedTokens and MaxNumSeqs
	// apply to every engine; zero means vLLM's default.
	BlockSize        int
	NumBlocks        int
	MaxBatchedTokens int
	MaxNumSeqs       int
	// HostKVBytes sizes each engine's host-memory (CPU) KV tier, loaded at
	// Hardware.HostBytesPerSec; 0: no tier, the engines as before.
	HostKVBytes float64
	// Seed makes each engine's published hashes distinct and reproducible.
	Seed uint64
	SLO  SLO
	// SampleEvery is the simulated interval of queue and KV usage samples (default 1 s).
	SampleEvery time.Duration
}

// DefaultFleet is 2 prefill and 2 decode workers of the default hardware.
func DefaultFleet() FleetConfig {
	return FleetConfig{Prefill: 2, Decode: 2, Hardware: DefaultHardware(), Seed: 1, SLO: DefaultSLO()}
}

func (c *FleetConfig) defaults() {
	if c.Hardware.Params == 0 {
		c.Hardware = DefaultHardware()
	}
	if c.BlockSize == 0 {
		c.BlockSize = vllmBlockSize
	}
	if c.NumBlocks == 0 {
		c.NumBlocks = c.Hardware.KVBlocks(c.BlockSize)
	}
	if c.MaxBatchedTokens == 0 {
		c.MaxBatchedTokens = vllmMaxBatchedTokensFor(c)
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = vllmMaxNumSeqs
	}
	if c.SLO == (SLO{}) {
		c.SLO = DefaultSLO()
	}
	if c.SampleEvery <= 0 {
		c.SampleEvery = time.Second
	}
}

func vllmMaxBatchedTokensFor(*FleetConfig) int { return vllmMaxNumBatchedTokens }

// Validate checks the fleet's sizes.
func (c FleetConfig) Validate() error {
	if c.Decode < 1 || c.Prefill < 0 {
		return fmt.Errorf("fleet: need at least 1 decode worker and ≥ 0 prefill workers (got %dP%dD)", c.Prefill, c.Decode)
	}
	if c.Prefill+c.Decode > 256 {
		return fmt.Errorf("fleet: %d workers is more than this simulator is meant for (256)", c.Prefill+c.Decode)
	}
	if !(c.HostKVBytes >= 0 && c.HostKVBytes <= MaxHostKVBytes) {
		return fmt.Errorf("fleet: host KV tier of %v bytes: want 0 (none) up to %d GiB", c.HostKVBytes, MaxHostKVBytes>>30)
	}
	if c.HostKVBytes > 0 && !(c.Hardware.HostBytesPerSec > 0 && c.Hardware.HostBytesPerSec <= MaxHostBytesPerSec) {
		return fmt.Errorf("fleet: host tier bandwidth of %v bytes/s: want more than 0, up to %g GB/s", c.Hardware.HostBytesPerSec, MaxHostBytesPerSec/1e9)
	}
	return nil
}

// EngineConfigs lists the engines of the fleet: prefill-0…, then decode-0….
func (c FleetConfig) EngineConfigs() []EngineConfig {
	c.defaults()
	var out []EngineConfig
	add := func(pool Pool, n int) {
		for i := range n {
			out = append(out, EngineConfig{ID: fmt.Sprintf("%s-%d", pool, i), Pool: pool, Model: c.Hardware.ModelName,
				BlockSize: c.BlockSize, NumBlocks: c.NumBlocks, MaxBatchedTokens: c.MaxBatchedTokens, MaxNumSeqs: c.MaxNumSeqs,
				HostBlocks: c.Hardware.HostKVBlocks(c.HostKVBytes, c.BlockSize),
				Seed:       mix64(c.Seed ^ uint64(len(out)+1)*0x9e3779b97f4a7c15)})
		}
	}
	add(PoolPrefill, c.Prefill)
	add(PoolDecode, c.Decode)
	return out
}

// engineOutputs are an engine's live endpoints.
type engineOutputs struct {
	pub     *Publisher
	metrics *MetricsServer
	// host and port are where the engine's HTTP API listens (live runs), named as
	// remote_host and remote_port in its P/D answers.
	host    string
	port    int
	queries uint64
	hits    uint64
	// computed and prefills feed vllm:request_prefill_kv_computed_tokens.
	computed, prefills uint64
}

// Fleet runs engines on one simulated clock and routes a workload through a Router.
// Everything runs on the goroutine that calls Run.
type Fleet struct {
	cfg     FleetConfig
	timing  Timing
	q       eventQueue
	engines []*Engine
	byID    map[string]*Engine
	outs    map[*Engine]*engineOutputs
	router  Router
	log     *slog.Logger

	// live, when set, paces the loop by the wall clock and feeds it the engines'
	// HTTP requests (live.go); offline it is nil and the loop runs flat out.
	live *liveLoop
	// held are prefilled KV caches waiting to be pulled by a decode engine, by
	// engine id and request id (external.go).
	held map[heldKey]*heldKV
	// kvHold is how long a prefill engine holds KV for a pull (0: the default).
	kvHold time.Duration
	// wallTS stamps KV event batches; nil stamps them with simulated time after
	// offlineEpoch.
	wallTS func() float64

	results  []*result
	bySeq    map[*seq]*result
	inflight int
	// maxContext is the longest context (prompt plus output) every engine serves.
	maxContext int
	// transfers under way
	transfers int
	pending   int // arrivals not yet routed
	samples   sampleStats
	// driven: a client outside the loop sends the workload through the
	// engines' API (RunViaOpenAI), so the loop samples the queues while it
	// does, as it does while a workload of its own is pending.
	driven bool
	// external counts what the engines did for the requests their API
	// served, for the report of a driven run.
	external externalCounts
	progress time.Duration // wall interval of progress logs (0: none)
	label    string
	ctx      context.Context
}

// offlineEpoch is the Unix time simulated time 0 maps to when batches are stamped with
// simulated time (offline runs and tests): 2025-09-10, an arbitrary fixed instant.
const offlineEpoch = 1757500000.0

// result is one request's fate.
type result struct {
	req        *Request
	dec        Decision
	err        error
	arrival    simTime
	firstToken simTime
	done       simTime
	finished   bool
	// routed: the request was placed (a decision, or an answer from an OpenAI
	// endpoint); decisionID: the router's decision id, when the answer named it.
	routed       bool
	decisionID   string
	promptHit    int // prompt tokens found cached where the prefill ran
	hostHit      int // prompt tokens loaded from that worker's host tier
	decodeHit    int // for remote: prompt tokens found cached on the decode worker
	transfer     int
	generated    int
	prefillEng   *Engine
	prefillSeq   *seq
	decodeEngine *Engine
}

type sampleStats struct {
	n                      int
	prefillWaitSum         float64
	prefillWaitMax         int
	prefillTokSum          float64
	prefillTokMax          int
	decodeUsageSum, decMax float64
	decodeWaitSum          float64
}

// NewFleet builds the engines. The router is attached to the fleet (an in-process
// router reads the engines directly).
func NewFleet(cfg FleetConfig, router Router, log *slog.Logger) (*Fleet, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Fleet{cfg: cfg, timing: NewTiming(cfg.Hardware), byID: map[string]*Engine{}, outs: map[*Engine]*engineOutputs{},
		router: router, log: log, bySeq: map[*seq]*result{}, ctx: context.Background()}
	for _, ec := range cfg.EngineConfigs() {
		e, err := newEngine(ec, f.timing, &f.q, f)
		if err != nil {
			return nil, err
		}
		f.engines = append(f.engines, e)
		f.byID[ec.ID] = e
		if n := engineMaxModelLen(cfg.Hardware, ec); f.maxContext == 0 || n < f.maxContext {
			f.maxContext = n
		}
	}
	if fa, ok := router.(fleetAware); ok {
		fa.attach(f)
	}
	return f, nil
}

// Engines returns the fleet's engines, prefill first.
func (f *Fleet) Engines() []*Engine { return f.engines }

// Engine returns an engine by id.
func (f *Fleet) Engine(id string) *Engine { return f.byID[id] }

// Config returns the fleet's configuration with defaults filled in.
func (f *Fleet) Config() FleetConfig { return f.cfg }

// Run routes every request of w and simulates until all are done (or ctx ends; the
// report then covers what finished). label names the run in the report.
func (f *Fleet) Run(ctx context.Context, w *Workload, label string) (*Report, error) {
	f.ctx, f.label = ctx, label
	f.results = make([]*result, len(w.Requests))
	for i, r := range w.Requests {
		res := &result{req: r, arrival: r.Arrival}
		f.results[i] = res
		f.q.at(r.Arrival, func() { f.arrive(res) })
	}
	f.pending = len(w.Requests)
	if len(w.Requests) > 0 {
		f.q.at(0, f.sample)
	}
	wallStart := time.Now()
	nextLog := wallStart.Add(f.progress)
	// Offline the run ends when nothing is left to happen. Live, HTTP requests
	// may keep the queue busy, so it ends as soon as the workload is done (or
	// cannot progress: the queue ran dry with requests in flight).
	for !(f.live != nil && f.pending == 0 && f.inflight == 0) {
		if !f.advance(ctx, false) {
			break
		}
		if f.progress > 0 && time.Now().After(nextLog) {
			f.logProgress(time.Since(wallStart))
			nextLog = time.Now().Add(f.progress)
		}
	}
	rep := f.report(label)
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	return rep, nil
}

// advance runs the next event once it is due, or (live) one piece of work an HTTP
// handler injected. It returns false when ctx ended, or when the queue is empty and
// wait is false; with wait it blocks on an empty queue until work is injected.
func (f *Fleet) advance(ctx context.Context, wait bool) bool {
	t, ok := f.q.peek()
	if !ok && (!wait || f.live == nil) {
		return false
	}
	if f.live != nil {
		due, err := f.live.wait(ctx, t, ok)
		if err != nil {
			return false
		}
		if !due {
			return true
		}
	}
	if ctx.Err() != nil {
		return false
	}
	ev, _ := f.q.pop()
	ev.fn()
	return true
}

func (f *Fleet) arrive(res *result) {
	f.pending--
	r := res.req
	if r.PromptLen < 1 {
		res.err = fmt.Errorf("request %s has an empty prompt", r.ID)
		return
	}
	if r.PromptLen+r.OutputLen > f.maxContext {
		// What every engine of the fleet answers with a 400, whichever the router
		// picked: the request is not routed, so every policy fails it alike.
		res.err = fmt.Errorf("request %s: %w: %d prompt + %d output tokens, context %d",
			r.ID, errOverContext, r.PromptLen, r.OutputLen, f.maxContext)
		return
	}
	tokens := r.Tokens()
	d, err := f.router.Route(f.ctx, r, tokens)
	if err != nil {
		res.err = err
		f.log.Warn("route failed", "request", r.ID, "err", err)
		return
	}
	res.dec, res.routed, res.decisionID = d, true, d.DecisionID
	dec := f.byID[d.DecodeWorker]
	if dec == nil || dec.cfg.Pool != PoolDecode {
		res.err = fmt.Errorf("router chose decode worker %q, which is not a decode worker of this fleet", d.DecodeWorker)
		f.log.Warn("bad decision", "request", r.ID, "err", res.err)
		return
	}
	res.decodeEngine = dec
	f.inflight++
	switch d.Mode {
	case ModeLocal:
		s := dec.submit(r, kindLocal, tokens)
		f.bySeq[s] = res
		dec.kick()
	case ModeRemote:
		p := f.byID[d.PrefillWorker]
		if p == nil || p.cfg.Pool != PoolPrefill {
			f.inflight--
			res.err = fmt.Errorf("router chose prefill worker %q, which is not a prefill worker of this fleet", d.PrefillWorker)
			f.log.Warn("bad decision", "request", r.ID, "err", res.err)
			return
		}
		res.prefillEng = p
		s := p.submit(r, kindPrefill, tokens)
		f.bySeq[s] = res
		p.kick()
	default:
		f.inflight--
		res.err = fmt.Errorf("router answered mode %q", d.Mode)
	}
}

// engineHooks

func (f *Fleet) prefillDone(e *Engine, s *seq) {
	if s.ext != nil {
		f.extPrefillDone(e, s)
		return
	}
	res := f.bySeq[s]
	delete(f.bySeq, s)
	res.promptHit, res.hostHit = s.hitTokens, s.hostHitTokens
	res.prefillSeq = s
	ds := res.decodeEngine.submit(res.req, kindRemote, slices.Clone(s.tokens[:s.promptLen()]))
	f.bySeq[ds] = res
	f.countQuery(e, s)
	res.decodeEngine.kick()
}

func (f *Fleet) transferStart(e *Engine, s *seq) {
	if s.ext != nil {
		f.extTransferStart(e, s)
		return
	}
	res := f.bySeq[s]
	res.decodeHit, res.transfer = s.hitTokens, s.transferTokens
	done := e.scheduleTransfer(f.timing.Transfer(s.transferTokens))
	f.transfers++
	f.q.at(done, func() {
		f.transfers--
		e.transferDone(s)
		if res.prefillSeq != nil {
			res.prefillEng.release(res.prefillSeq)
			res.prefillSeq = nil
			f.updateMetrics(res.prefillEng)
		}
	})
}

func (f *Fleet) firstToken(e *Engine, s *seq) {
	if s.ext != nil {
		if s.kind == kindLocal {
			f.countQuery(e, s)
		}
		return
	}
	res := f.bySeq[s]
	res.firstToken = f.q.now
	if s.kind == kindLocal {
		res.promptHit, res.hostHit = s.hitTokens, s.hostHitTokens
		f.countQuery(e, s)
	}
	f.router.PrefillDone(f.ctx, res.req, res.firstToken-res.arrival)
}

func (f *Fleet) token(_ *Engine, s *seq) {
	if s.ext != nil {
		s.ext.sink.add(s.tokens[len(s.tokens)-1])
	}
}

func (f *Fleet) finished(e *Engine, s *seq) {
	if s.ext != nil {
		s.ext.sink.finish(nil, s.hitTokens, nil)
		return
	}
	res := f.bySeq[s]
	delete(f.bySeq, s)
	res.done, res.finished, res.generated = f.q.now, true, s.generated
	f.inflight--
	f.router.Completed(f.ctx, res.req, s.generated, res.itl())
}

func (f *Fleet) countQuery(e *Engine, s *seq) {
	if s.ext != nil {
		f.external.promptTokens += int64(s.promptLen())
		f.external.hitTokens += int64(s.hitTokens)
		f.external.hostHitTokens += int64(s.hostHitTokens)
	}
	if o := f.outs[e]; o != nil {
		o.queries += uint64(s.promptLen())
		o.hits += uint64(s.hitTokens)
		o.computed += uint64(s.promptLen() - s.hitTokens - s.hostHitTokens)
		o.prefills++
	}
}

func (f *Fleet) stepDone(e *Engine, events []KVEvent) {
	o := f.outs[e]
	if o == nil {
		return
	}
	if o.pub != nil && len(events) > 0 {
		ts := offlineEpoch + f.q.now.Seconds()
		if f.wallTS != nil {
			ts = f.wallTS()
		}
		if _, _, err := o.pub.Publish(ts, events); err != nil {
			f.log.Warn("publish KV events", "worker", e.cfg.ID, "err", err)
		}
	}
	f.updateMetrics(e)
}

func (f *Fleet) updateMetrics(e *Engine) {
	if o := f.outs[e]; o != nil && o.metrics != nil {
		l := e.Load()
		o.metrics.Set(MetricsSample{Running: l.Running, Waiting: l.Waiting, KVUsage: l.KVUsage, PrefixQueries: o.queries, PrefixHits: o.hits,
			PrefillComputed: o.computed, PrefillRequests: o.prefills})
	}
}

// sample records queue depths and KV usage every SampleEvery while work remains.
func (f *Fleet) sample() {
	s := &f.samples
	s.n++
	for _, e := range f.engines {
		l := e.Load()
		if e.cfg.Pool == PoolPrefill {
			s.prefillWaitSum += float64(l.Waiting)
			s.prefillWaitMax = max(s.prefillWaitMax, l.Waiting)
			s.prefillTokSum += float64(l.PrefillTokens)
			s.prefillTokMax = max(s.prefillTokMax, l.PrefillTokens)
		} else {
			s.decodeUsageSum += l.KVUsage
			s.decMax = max(s.decMax, l.KVUsage)
			s.decodeWaitSum += float64(l.Waiting)
		}
	}
	if f.pending == 0 && f.inflight > 0 && f.stalled() {
		return
	}
	if f.pending > 0 || f.inflight > 0 || f.driven {
		f.q.after(f.cfg.SampleEvery, f.sample)
	}
}

// stalled reports (and logs) requests that can never progress: no arrival pending, no
// engine stepping, no transfer under way, yet requests in flight. That is a bug in the
// model (or a request larger than an engine's cache); the run then ends with those
// requests unfinished instead of sampling an idle fleet forever.
func (f *Fleet) stalled() bool {
	if f.transfers > 0 {
		return false
	}
	for _, e := range f.engines {
		if e.busy || e.loading > 0 {
			return false
		}
	}
	for _, e := range f.engines {
		for _, s := range append(slices.Clone(e.waiting), e.running...) {
			f.log.Error("sim: request cannot progress", "engine", e.cfg.ID, "request", s.req.ID, "kind", s.kind, "state", s.state,
				"prompt", s.promptLen(), "output", s.req.OutputLen, "free_blocks", e.pool.NumFree(), "reserved", e.reserved, "running", len(e.running))
		}
	}
	return true
}

func (f *Fleet) logProgress(wall time.Duration) {
	done, local, total := 0, 0, len(f.results)
	var ttfts []time.Duration
	for _, r := range f.results {
		if r.finished {
			done++
			ttfts = append(ttfts, r.firstToken-r.arrival)
			if r.dec.Mode == ModeLocal {
				local++
			}
		}
	}
	share := 0.0
	if done > 0 {
		share = float64(local) / float64(done)
	}
	f.log.Info("sim progress", "run", f.label, "done", done, "of", total, "in_flight", f.inflight,
		"local_share", fmt.Sprintf("%.2f", share), "ttft_p50", percentile(ttfts, 0.5).Round(time.Millisecond),
		"sim_time", f.q.now.Round(time.Second), "wall", wall.Round(time.Second))
}

// itl is the request's mean inter-token latency (0 with fewer than 2 tokens).
func (r *result) itl() time.Duration {
	if r.generated < 2 {
		return 0
	}
	return (r.done - r.firstToken) / time.Duration(r.generated-1)
}

// chainOf is the router hash chain of tokens for a block size.
func chainOf(tokens []uint32, blockSize int) []uint64 {
	return kvhash.Chain(nil, tokens, blockSize, 0, false)
}
