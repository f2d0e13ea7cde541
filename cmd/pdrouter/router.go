package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/decider/deciderflags"
	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/events/logread"
	"github.com/pdrouter/pdrouter/ingest"
	"github.com/pdrouter/pdrouter/internal/addrfile"
	"github.com/pdrouter/pdrouter/kafkaconn"
	"github.com/pdrouter/pdrouter/latmodel"
	"github.com/pdrouter/pdrouter/statestore"
)

// routerFlags are the flags of a router replica, shared by serve and dev.
type routerFlags struct {
	decider        *deciderflags.Flags
	replicaID      string
	authToken      string
	tlsCert        string
	tlsKey         string
	readyLag       int64
	afterTimeout   time.Duration
	auditTimeout   time.Duration
	bodyLimit      int64
	maxTokens      int
	bootstrapFrom  string
	shutdownTimout time.Duration
	debugAddr      string
	// addrFile, when set, receives the bound addresses (internal/addrfile).
	addrFile string
	// decisionRetention is statestore.Options.DecisionRetention.
	decisionRetention time.Duration
	// fetchMinBytes and fetchMaxWait are the materializer's fetch batch
	// (statestore.MaterializerOptions).
	fetchMinBytes int32
	fetchMaxWait  time.Duration
	// The HTTP server's bounds on a request (httpServer).
	httpReadTimeout       time.Duration
	httpReadHeaderTimeout time.Duration
	httpIdleTimeout       time.Duration
	httpMaxHeaderBytes    int
	maxAfterPartitions    int
	// maxWorkers is statestore.Options.MaxWorkers and the API's cap.
	maxWorkers int
	// cell is --cell; parsed into cellOf by validate.
	cell   string
	cellOf events.Cell
	// loadDeltas is --load-deltas; parsed into writeDeltas and source by
	// validate.
	loadDeltas  string
	writeDeltas bool
	source      statestore.Source
	// peerRequests is --peer-requests: where a store of load deltas keeps
	// the log's requests (statestore.Options.PeerSums).
	peerRequests string
	// idempotencyWindow is statestore.Options.IdempotencyWindow.
	idempotencyWindow time.Duration
	// latencyWindow and latencyMaxEntries shape the online latency model
	// (statestore.Options.LatencyModel, docs/slo-policy.md).
	latencyWindow     time.Duration
	latencyMaxEntries int
	// latencySamplesPerSecond is statestore.Options.LatencySamplesPerSecond
	// (0: none).
	latencySamplesPerSecond int
	// The bounds of a decision record (api.WithDecisionMaxCandidates,
	// api.WithDecisionRecordMaxBytes).
	decisionMaxCandidates  int
	decisionRecordMaxBytes int
	// decisionSearch bounds the searches of the decisions topic for
	// decisions the state does not hold (api.WithDecisionSearch).
	decisionSearch api.DecisionSearch
	// door configures the OpenAI front door (doorflags.go).
	door doorFlags
}

// The materializer's default fetch batch. Under load a replica spends a
// fixed cost per fetch (the client's response handling, a Pebble commit, a
// scheduler wake-up) besides its cost per record, and every replica tails
// every peer's decisions: at ~1,800 decisions/s, fetches answered at 256 KiB
// or 10 ms (~6 ms apart) cost a peer 117–139 µs of CPU per applied decision
// and these 90–92 µs, in three alternated `bench scale` runs each
// (docs/scaling.md, "Fewer, larger fetches"). The price is apply lag: on a quiet log
// a record waits up to defaultFetchMaxWait to be applied, which `after`
// waits and a replica's view of its peers' decisions feel; its own
// decisions count at once.
const (
	defaultFetchMinBytes = 4 << 20
	defaultFetchMaxWait  = 50 * time.Millisecond
)

func (f *routerFlags) bindFlags(fs *pflag.FlagSet) {
	f.decider = deciderflags.Register(fs)
	f.door.bindFlags(fs)
	host, _ := os.Hostname()
	fs.StringVar(&f.replicaID, "replica-id", host, "name of this replica in the decisions it records")
	fs.StringVar(&f.authToken, "auth-token", "", "require Authorization: Bearer <token> on /v1 (prefer PDR_AUTH_TOKEN to the flag)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM key of --tls-cert")
	fs.Int64Var(&f.readyLag, "ready-lag", 1000, "/readyz answers 200 only when the state is at most this many records behind the log")
	fs.DurationVar(&f.afterTimeout, "after-timeout", 5*time.Second, "how long /v1/route waits for the offsets in a request's \"after\" field before 504")
	fs.DurationVar(&f.auditTimeout, "audit-timeout", 10*time.Second, "how long a decision may wait to be durable on the decisions topic before 503")
	fs.Int64Var(&f.bodyLimit, "max-body-bytes", 16<<20, "largest request body (413 above)")
	fs.IntVar(&f.maxTokens, "max-prompt-tokens", 1<<21, "longest prompt /v1/route takes, in tokens (413 above)")
	fs.StringVar(&f.bootstrapFrom, "bootstrap-from", "", "when the store is empty, start from a snapshot of this peer (http://peer:8080/v1/state/snapshot) instead of replaying the whole log; sends --auth-token; falls back to replaying when the peer has none")
	fs.DurationVar(&f.shutdownTimout, "shutdown-timeout", 15*time.Second, "how long in-flight requests may take on SIGTERM")
	fs.StringVar(&f.debugAddr, "debug-addr", "", "serve Go's /debug/pprof profiles on this address (keep it private: it exposes internals)")
	fs.StringVar(&f.addrFile, "addr-file", "", "once the API accepts requests, write the addresses it and --debug-addr are bound to, as JSON {\"http_addr\",\"debug_addr\"}, to this file: a supervisor that gives --http-addr 127.0.0.1:0 learns the port the kernel chose")
	fs.Int32Var(&f.fetchMinBytes, "fetch-min-bytes", defaultFetchMinBytes, "the broker answers the state's log fetches once it holds this many bytes, or after --fetch-max-wait: fewer, larger fetches cost this replica and the broker less CPU per record under load")
	fs.DurationVar(&f.fetchMaxWait, "fetch-max-wait", defaultFetchMaxWait, "longest a log fetch waits for --fetch-min-bytes (≥ 10ms); also the most it adds to apply lag, and so to `after` waits, when the log is quiet")
	fs.DurationVar(&f.httpReadTimeout, "http-read-timeout", 30*time.Second, "longest a request's body may take to arrive, from the end of its headers (408 past it, or the connection is closed)")
	fs.DurationVar(&f.httpReadHeaderTimeout, "http-read-header-timeout", 10*time.Second, "longest a request's line and headers may take to arrive (the connection is closed past it)")
	fs.DurationVar(&f.httpIdleTimeout, "http-idle-timeout", 2*time.Minute, "how long a keep-alive connection may wait for its next request")
	fs.IntVar(&f.httpMaxHeaderBytes, "http-max-header-bytes", 64<<10, "largest request line and headers, in bytes (431 above)")
	fs.IntVar(&f.maxAfterPartitions, "max-after-partitions", 1024, "most entries, topics and partitions together, in the \"after\" vector of /v1/route (422 above)")
	fs.DurationVar(&f.latencyWindow, "latency-model-window", latmodel.DefaultBuckets*latmodel.DefaultBucketWidth, "event time of outcomes the slo policy's latency model learns from (a multiple of 30s). Give every replica the same value: it shapes the state they compare")
	fs.IntVar(&f.latencySamplesPerSecond, "latency-samples-per-second", statestore.DefaultLatencySamplesPerSecond, "with --load-deltas snapshots, at most this many of its ended requests a second a replica sends its peers' latency models with its snapshots (each costs a peer about what a snapshot does; 0: none, and each replica's model learns from its own requests alone)")
	fs.IntVar(&f.latencyMaxEntries, "latency-model-max-entries", latmodel.DefaultMaxEntries, "most decisions and outcomes the latency model holds while it joins them. Past it, each bucket of the window keeps the decisions of the smallest id hashes, the same on every replica (pdrouter_latency_model_dropped_total{reason=\"sampled\"}); ids that are not ULIDs are dropped first-come (reason=\"max_entries\")")
	fs.StringVar(&f.cell, "cell", "0/1", "the cell of the log this replica applies and answers for, i/n: partitions p with p mod n = i of every topic, and so the workers whose ids hash there (docs/scaling.md, Cells). n must divide every topic's partition count; every replica of a cell gives the same value. 0/1 is the whole log")
	fs.StringVar(&f.loadDeltas, "load-deltas", "apply", "how the replicas of a group share load (docs/scaling.md, Load deltas): off (apply peers' whole decisions and outcomes, write no deltas), write (the same, and append a load delta with every decision and lifecycle event: the first step of a migration), apply (append deltas and apply peers' deltas instead of their decisions and outcomes, which stay on the log for audit; the group then scales), snapshots (append deltas to this replica's own partition of load-deltas, which it alone reads back, and with every group commit one load-shares record of its share of each worker's load; peers keep a row per replica and worker; a lifecycle event for a peer's request goes to the forwards topic for that peer to apply; needs a distinct --replica-id per replica and no --bootstrap-from). Every replica of a group gives the same value but for write beside apply; a store built in the other mode is refused: delete it to rebuild by replay")
	fs.StringVar(&f.peerRequests, "peer-requests", "memory", "with --load-deltas apply, where a replica keeps the requests the group decided, for their load: memory (open requests, ended in their partition's order and checkpointed every 5s of the log's clock; a restart reads the load deltas since the last checkpoint again; lookups by request id, for idempotent retries and lifecycle events, find a decision while its request is open and --idempotency-window after it was decided, and by decision id past that the decisions topic is searched) or pebble (a fact per request written to the store, the earlier layout). Give every replica the same value: it shapes the state they compare; a store built with the other is rebuilt by replay")
	fs.DurationVar(&f.idempotencyWindow, "idempotency-window", decider.RecentLocalWindow, "with --peer-requests memory, how long after its decision a request stays held, ended or not, so that a retry under its request_id is answered with its decision and a lifecycle event finds it (--decision-retention otherwise). From 30s to --decision-retention; longer costs memory, ~0.7 KB of heap a decision held, and a checkpoint write per decision held past a minute. Give every replica the same value: it shapes the state they compare")
	fs.IntVar(&f.maxWorkers, "max-workers", statestore.DefaultMaxWorkers, "most registered worker ids: a registration of a new id beyond it is answered 422 too_many_workers and skipped by every replica that applies it. Give every replica the same value: it shapes the state they compare")
	fs.IntVar(&f.decisionMaxCandidates, "decision-max-candidates", api.DefaultDecisionMaxCandidates, "candidate rows a decision record keeps: the picked workers, then the best ranked others; the record counts the rows it leaves out")
	fs.IntVar(&f.decisionRecordMaxBytes, "decision-record-max-bytes", api.DefaultDecisionRecordMaxBytes, fmt.Sprintf("largest decision record value, in bytes (%d to %d): hash chains are cut to fit, and a decision whose record still does not fit is answered 413 decision_record_too_large; keep it below the decisions topic's max.message.bytes (serve warns)", api.MinDecisionRecordMaxBytes, api.MaxDecisionRecordMaxBytes))
	fs.IntVar(&f.decisionSearch.Concurrent, "decision-search-concurrency", api.DefaultDecisionSearches, "most searches of the decisions topic that run at once for GET /v1/decisions/{id} of a decision past --decision-retention; one more is answered 503 decision_search_busy")
	fs.DurationVar(&f.decisionSearch.Timeout, "decision-search-timeout", api.DefaultDecisionSearchTimeout, "longest a search of the decisions topic for a decision past --decision-retention may take, every partition together (503 decision_search_limited past it)")
	fs.DurationVar(&f.decisionRetention, "decision-retention", 24*time.Hour, "how long after its event time every replica keeps a decision record, for GET /v1/decisions, explain and idempotent retries; the data dir keeps each one's header, ~0.45 KB on disk, and reads the whole record back from the decisions topic, whose retention.ms should be at least this (deployments/README.md, Sizing). Give every replica the same value: it shapes the state they compare. In approximate mode it is at least the 2m prediction TTL")
}

func (f *routerFlags) validate() error {
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if f.readyLag < 0 || f.afterTimeout <= 0 || f.auditTimeout <= 0 || f.bodyLimit < 1024 || f.maxTokens < 1 {
		return errors.New("--ready-lag ≥ 0, --after-timeout and --audit-timeout > 0, --max-body-bytes ≥ 1024 and --max-prompt-tokens ≥ 1")
	}
	if f.fetchMinBytes < 1 || f.fetchMaxWait < 10*time.Millisecond {
		return fmt.Errorf("--fetch-min-bytes %d, --fetch-max-wait %s: want at least 1 byte and 10ms", f.fetchMinBytes, f.fetchMaxWait)
	}
	if f.httpReadTimeout <= 0 || f.httpReadHeaderTimeout <= 0 || f.httpIdleTimeout <= 0 || f.httpMaxHeaderBytes < 4096 || f.maxAfterPartitions < 1 {
		return errors.New("--http-read-timeout, --http-read-header-timeout and --http-idle-timeout > 0, --http-max-header-bytes ≥ 4096 and --max-after-partitions ≥ 1")
	}
	if f.latencyWindow < latmodel.DefaultBucketWidth || f.latencyWindow > 24*time.Hour || f.latencyWindow%latmodel.DefaultBucketWidth != 0 {
		return fmt.Errorf("--latency-model-window %s: want a multiple of %s in [%s, 24h]", f.latencyWindow, latmodel.DefaultBucketWidth, latmodel.DefaultBucketWidth)
	}
	if f.latencySamplesPerSecond < 0 || f.latencySamplesPerSecond > 1_000_000 {
		return fmt.Errorf("--latency-samples-per-second %d: want 0 to 1000000", f.latencySamplesPerSecond)
	}
	if f.latencyMaxEntries < 1 || f.latencyMaxEntries > 50_000_000 {
		return fmt.Errorf("--latency-model-max-entries %d: want 1 to 50000000", f.latencyMaxEntries)
	}
	if f.maxWorkers < 1 {
		return fmt.Errorf("--max-workers %d: want at least 1", f.maxWorkers)
	}
	c, err := events.ParseCell(f.cell)
	if err != nil {
		return fmt.Errorf("--cell: %w", err)
	}
	f.cellOf = c
	if f.writeDeltas, f.source, err = parseLoadDeltas(f.loadDeltas); err != nil {
		return err
	}
	if f.source == statestore.SourceLoadShares && f.bootstrapFrom != "" {
		// A peer's snapshot holds the peer's own requests whole and this
		// replica's only as rows: a store started from it would count
		// the peer's requests as its own.
		return errors.New("--bootstrap-from with --load-deltas snapshots: a peer's snapshot holds that peer's own requests, not this replica's; a new replica of snapshots reads the log (drop --bootstrap-from)")
	}
	if f.source == statestore.SourceLoadShares && (f.replicaID == "" || len(f.replicaID) > events.MaxNameLen) {
		return fmt.Errorf("--replica-id %q: with --load-deltas snapshots it keys this replica's snapshots and picks its load-deltas partition: want 1 to %d bytes, distinct in the group", f.replicaID, events.MaxNameLen)
	}
	if f.peerRequests != "memory" && f.peerRequests != "pebble" {
		return fmt.Errorf("--peer-requests %q: want memory or pebble", f.peerRequests)
	}
	if f.decisionMaxCandidates < api.MinDecisionMaxCandidates || f.decisionRecordMaxBytes < api.MinDecisionRecordMaxBytes || f.decisionRecordMaxBytes > api.MaxDecisionRecordMaxBytes {
		return fmt.Errorf("--decision-max-candidates %d, --decision-record-max-bytes %d: want at least %d rows, and %d to %d bytes",
			f.decisionMaxCandidates, f.decisionRecordMaxBytes, api.MinDecisionMaxCandidates, api.MinDecisionRecordMaxBytes, api.MaxDecisionRecordMaxBytes)
	}
	if err := f.door.validate(); err != nil {
		return err
	}
	if f.decisionSearch.Concurrent < 1 || f.decisionSearch.Timeout < time.Second {
		return fmt.Errorf("--decision-search-concurrency %d, --decision-search-timeout %s: want at least 1 search and 1s",
			f.decisionSearch.Concurrent, f.decisionSearch.Timeout)
	}
	if f.decisionRetention < time.Second {
		return fmt.Errorf("--decision-retention %s: want at least 1s (records are looked up by later requests and lifecycle events)", f.decisionRetention)
	}
	if w := f.idempotencyWindow; w < decider.RecentLocalWindow || w > max(f.decisionRetention, decider.RecentLocalWindow) {
		return fmt.Errorf("--idempotency-window %s: want %s to --decision-retention (%s)", w, decider.RecentLocalWindow, f.decisionRetention)
	}
	return nil
}

// httpServer is the API's server. The body's read timeout and the header
// limit are the API's (api.WithReadTimeout, api.WithMaxHeaderBytes), which
// answer them in the JSON error shape; the server's own MaxHeaderBytes is
// twice the limit, a backstop for heads the API would refuse anyway, whose
// refusal is Go's plain-text 431.
func (f *routerFlags) httpServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: f.httpReadHeaderTimeout, IdleTimeout: f.httpIdleTimeout,
		MaxHeaderBytes: 2 * f.httpMaxHeaderBytes}
}

// routerRun is one router replica: the materializer keeping the store
// current, the API answering decisions, and, when ingestCfg is set, ingest.
type routerRun struct {
	a         *app
	f         *routerFlags
	connOpts  []kgo.Opt
	ingestCfg *ingest.Config
	// listening is called with the API's address once it accepts requests.
	listening func(addr string)
	// registered, when set, is called with the replica's metrics registry
	// before listening, so that what runs beside the replica (dev's
	// simulated fleet) exports its series with the replica's.
	registered func(prometheus.Registerer)
	// registerer, when set, wraps the metrics registry for the replica's
	// parts, so a test sees every family they register, series or not.
	registerer func(prometheus.Registerer) prometheus.Registerer
}

// storeOptions are the replica's statestore options: its flags and the
// decider's configuration.
func (r *routerRun) storeOptions(cfg decider.Config, reg prometheus.Registerer) statestore.Options {
	o := statestore.Options{
		Names: r.a.names(), Logger: r.a.log, Registerer: reg,
		ActiveExpiry: cfg.ActiveRequestExpiry, Approximate: cfg.Approximate(),
		DecisionRetention: r.f.decisionRetention, MaxWorkers: r.f.maxWorkers, Cell: r.f.cellOf,
		// A store of the other --load-deltas mode is rebuilt by replay: a
		// rolling restart into another mode does not stop at its first
		// replica.
		Source: r.f.source, RebuildOtherSource: true, PeerSums: r.f.peerRequests == "memory", IdempotencyWindow: r.f.idempotencyWindow,
		LatencyModel: latmodel.Config{Buckets: int(r.f.latencyWindow / latmodel.DefaultBucketWidth), MaxEntries: r.f.latencyMaxEntries},
	}
	if r.f.source == statestore.SourceLoadShares {
		setShareWriter(&o, r.f.replicaID, sharesEpoch(time.Now()))
		o.LatencySamplesPerSecond = r.f.latencySamplesPerSecond
		if o.LatencySamplesPerSecond == 0 {
			o.LatencySamplesPerSecond = -1 // the flag's 0 is none, the option's the default
		}
	}
	return o
}

// setShareWriter names the writer of the store's load-share snapshots.
func setShareWriter(o *statestore.Options, replicaID string, epoch uint64) {
	o.ReplicaID, o.SharesEpoch = replicaID, epoch
}

// sharesEpoch is where a replica's snapshot seq starts when it opens: the
// wall clock in ns, a writer-side choice. Peers keep, per (writer, worker),
// the entry of the highest seq, so a restarted writer must not go back
// below the seqs its previous run wrote; it writes far fewer than 10^9
// snapshots a second, so a clock that does not step back gives it seqs
// above them without storing anything. No state transition reads it: the
// seq is in the record, and peers apply what they read.
func sharesEpoch(now time.Time) uint64 { return uint64(now.UnixNano()) }

// groupLogMaxQueued bounds the bytes of records waiting for the event log
// (api.GroupLog): ~2,500 decision records of a 160-worker fleet. Past it,
// appends answer 503 at once.
const groupLogMaxQueued = 64 << 20

// materializerOptions are the replica's materializer options; its
// consumer reports on reg as client="materializer".
func (r *routerRun) materializerOptions(reg prometheus.Registerer) statestore.MaterializerOptions {
	return statestore.MaterializerOptions{Client: r.connOpts, Consumer: func() []kgo.Opt { return []kgo.Opt{kafkaconn.Metrics(reg, "materializer")} }, Logger: r.a.log,
		FetchMinBytes: r.f.fetchMinBytes, FetchMaxWait: r.f.fetchMaxWait}
}

func (r *routerRun) run(ctx context.Context) error {
	a, f := r.a, r.f
	if err := f.validate(); err != nil {
		return err
	}
	if err := a.tuneMemory(); err != nil {
		return err
	}
	cfg, err := f.decider.Config(a.env)
	if err != nil {
		return err
	}
	dec, err := decider.New(cfg)
	if err != nil {
		return err
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var reg prometheus.Registerer = registry
	if r.registerer != nil {
		reg = r.registerer(registry)
	}
	sopts := r.storeOptions(cfg, reg)
	// The store reads its requests' hash chains back from the decisions
	// topic when it opens (statestore/chains.go); the client goes after.
	rb, err := kgo.NewClient(slices.Clone(r.connOpts)...)
	if err != nil {
		return err
	}
	sopts.Records = logread.New(rb)
	store, err := r.openStore(ctx, sopts)
	rb.Close()
	if err != nil {
		return err
	}
	defer func() {
		if err := store.Close(); err != nil {
			a.log.Error("closing the store", "err", err)
		}
	}()
	mat, err := statestore.NewMaterializer(store, r.materializerOptions(reg))
	if err != nil {
		return err
	}
	defer mat.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 8)
	goRun := func(what string, fn func() error) {
		go func() {
			if err := wrap(what, fn()); err != nil {
				errc <- err
			}
		}()
	}
	// The gate reads the log's end before the replay gets far: until the
	// state reaches it, answers that read the log are 503 not_ready.
	started := api.NewCatchUp(mat, a.log)
	poolsJudged := make(chan error, 1)
	started.OnCaughtUp(func() { poolsJudged <- poolsAtStart(store, &cfg) })
	go func() { _ = started.Run(ctx) }()
	goRun("materializer", func() error { return mat.Run(ctx) })

	// The decisions producer: appends are group-committed (api.GroupLog),
	// acks=all and idempotence stay franz-go's defaults.
	prodOpts := append(api.GroupLogClientOpts(), kafkaconn.Metrics(reg, "decisions"))
	if f.source == statestore.SourceLoadShares {
		// Its own load deltas go to the one partition its store reads back,
		// and its snapshots to its partition of load-shares, in its cell.
		prodOpts = append(prodOpts, kgo.RecordPartitioner(api.WriterPartitioner(a.names(), f.replicaID, f.cellOf)))
	}
	prod, err := kgo.NewClient(append(slices.Clone(r.connOpts), prodOpts...)...)
	if err != nil {
		return err
	}
	defer prod.Close()
	for _, t := range requiredTopics(f.writeDeltas, f.source) {
		if err := requireTopic(ctx, kadm.NewClient(prod), a.names().Physical(t)); err != nil {
			return fmt.Errorf("--load-deltas %s: %w", f.loadDeltas, err)
		}
	}
	go warnDecisionTopicShort(ctx, kadm.NewClient(prod), a.names().Physical(events.TopicDecisions), f.decisionRetention, a.log)
	go warnDecisionTopicSmall(ctx, kadm.NewClient(prod), a.names().Physical(events.TopicDecisions), f.decisionRecordMaxBytes, a.log)
	if r.ingestCfg != nil {
		r.ingestCfg.Cell = f.cellOf
		cl, err := kgo.NewClient(append(slices.Clone(r.connOpts), append(ingest.ProducerOpts(r.ingestCfg.MaxRecordBytes), kafkaconn.Metrics(reg, "ingest"))...)...)
		if err != nil {
			return err
		}
		defer cl.Close()
		goRun("ingest", func() error {
			return ingest.Run(ctx, *r.ingestCfg, ingest.Deps{Kafka: cl, KafkaOpts: r.connOpts, Registerer: reg, Log: a.log})
		})
	}
	apiOpts := []api.Option{
		api.WithLogger(a.log), api.WithMetrics(reg, registry), api.WithReplicaID(f.replicaID), api.WithLoadDeltas(f.writeDeltas),
		api.WithForwardEvents(f.source == statestore.SourceLoadShares),
		api.WithAuthToken(f.authToken), api.WithReadyLag(f.readyLag), api.WithAfterTimeout(f.afterTimeout),
		api.WithAuditTimeout(f.auditTimeout), api.WithBodyLimit(f.bodyLimit), api.WithMaxTokens(f.maxTokens), api.WithMaxWorkers(f.maxWorkers),
		api.WithReadTimeout(f.httpReadTimeout), api.WithMaxHeaderBytes(f.httpMaxHeaderBytes), api.WithMaxAfterPartitions(f.maxAfterPartitions),
		api.WithDecisionMaxCandidates(f.decisionMaxCandidates), api.WithDecisionRecordMaxBytes(f.decisionRecordMaxBytes),
		api.WithDecisionSearch(f.decisionSearch),
	}
	doorOpt, err := f.door.option()
	if err != nil {
		return err
	}
	if doorOpt != nil {
		apiOpts = append(apiOpts, doorOpt)
	}
	glog := api.NewGroupLog(prod, a.names(), groupLogMaxQueued, reg)
	if f.source == statestore.SourceLoadShares {
		if err := glog.ShareLoad(ctx, store, f.replicaID, a.log); err != nil {
			return err
		}
	}
	srv, err := api.New(api.Deps{
		State:    &api.StoreState{Store: store, Lag: mat},
		Decider:  dec,
		Log:      glog,
		Names:    a.names(),
		Snapshot: store.SnapshotHandler(filepath.Join(a.dataDir, "tmp")),
		// Reads of whole records share the producer's client: franz-go
		// keeps fetches on connections of their own, apart from produces.
		Records: api.NewLogDecisionReader(prod, a.names()),
		Started: started,
	}, apiOpts...)
	if err != nil {
		return err
	}
	if f.source == statestore.SourceLoadShares {
		// Lifecycle events posted to a peer for this replica's requests
		// come through forwards (api/forwards.go).
		fwd, err := kgo.NewClient(append(slices.Clone(r.connOpts), append(api.ForwardReaderOpts(a.names(), f.replicaID), kafkaconn.Metrics(reg, "forwards"))...)...)
		if err != nil {
			return err
		}
		defer fwd.Close()
		goRun("forwards", func() error { return srv.RunForwards(ctx, fwd) })
	}
	ln, err := net.Listen("tcp", a.httpAddr)
	if err != nil {
		return fmt.Errorf("--http-addr %s: %w", a.httpAddr, err)
	}
	hs := f.httpServer(srv.Handler())
	goRun("http", func() error {
		var err error
		if f.tlsCert != "" {
			hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			err = hs.ServeTLS(ln, f.tlsCert, f.tlsKey)
		} else {
			err = hs.Serve(ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	})
	bound := addrfile.Addrs{HTTP: ln.Addr().String()}
	if f.debugAddr != "" {
		dl, err := net.Listen("tcp", f.debugAddr)
		if err != nil {
			return fmt.Errorf("--debug-addr %s: %w", f.debugAddr, err)
		}
		bound.Debug = dl.Addr().String()
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		ds := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = ds.Serve(dl) }()
		defer ds.Close()
		runtime.SetMutexProfileFraction(5)
		runtime.SetBlockProfileRate(100000)
	}
	a.log.Info("router serving", "http_addr", ln.Addr().String(), "replica_id", f.replicaID, "cell", f.cellOf.String(), "policy", cfg.Disagg.Policy,
		"conditional_disagg", cfg.ConditionalDisagg, "approximate", cfg.Approximate(), "config_hash", dec.ConfigHash())
	if f.addrFile != "" {
		if err := addrfile.Write(f.addrFile, bound); err != nil {
			return fmt.Errorf("--addr-file: %w", err)
		}
	}
	if r.registered != nil {
		r.registered(reg)
	}
	if r.listening != nil {
		r.listening(ln.Addr().String())
	}
	goRun("start-up check", func() error { return r.checkPools(ctx, store, &cfg, poolsJudged) })

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), f.shutdownTimout)
	defer scancel()
	if serr := hs.Shutdown(sctx); serr != nil {
		a.log.Warn("http shutdown", "err", serr)
	}
	cancel()
	return err
}

// openStore opens the replica's store, or bootstraps it from a peer's
// snapshot when it does not exist yet and --bootstrap-from is set. A peer
// that cannot serve a snapshot (a fresh cluster has no peer yet) is not
// fatal: the replica replays the log instead, which is slower but correct.
func (r *routerRun) openStore(ctx context.Context, o statestore.Options) (*statestore.Store, error) {
	dir := filepath.Join(r.a.dataDir, statestore.StoreDirName)
	if _, err := os.Stat(dir); os.IsNotExist(err) && r.f.bootstrapFrom != "" {
		start := time.Now()
		cl := &http.Client{Timeout: 10 * time.Minute, Transport: bearer{token: r.f.authToken, next: http.DefaultTransport}}
		s, m, err := statestore.BootstrapFromPeer(ctx, cl, r.f.bootstrapFrom, r.a.dataDir, o)
		if err == nil {
			r.a.log.Info("bootstrapped from a peer snapshot", "peer", r.f.bootstrapFrom, "offsets", m.Offsets.String(), "took", time.Since(start).Round(time.Millisecond))
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		r.a.log.Warn("no snapshot from the peer; replaying the log instead", "peer", r.f.bootstrapFrom, "err", err)
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	return statestore.Open(dir, o)
}

// bearer adds the replicas' shared --auth-token to requests to a peer.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	if b.token != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(req)
}

// checkPools enforces conditional-disagg.md's requirement of separate
// pools on the registry as it was replayed at start-up: a registry with
// workers but without both pools is a start-up error naming what is
// missing (atStart: the verdict of poolsAtStart, run as the state caught
// up). Workers may register after the router starts (the simulator does,
// dev's fleet a moment after the API listens, and a fleet's decode workers
// may come up before its prefill workers), so a registry that was empty at
// start-up is only warned about, first after poolWarnGrace, then every
// poolWarnEvery until both pools are there: a serving replica never exits
// because of the order its fleet registers in.
func (r *routerRun) checkPools(ctx context.Context, store *statestore.Store, cfg *decider.Config, atStart <-chan error) error {
	if !cfg.ConditionalDisagg {
		return nil
	}
	select {
	case err := <-atStart:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return nil
	}
	t := time.NewTicker(poolWarnGrace)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := registryPools(store, cfg)
		switch {
		case err == nil:
			return nil
		case n == 0:
			r.a.log.Warn("conditional disaggregation is on but no worker is registered yet", "err", err)
		default:
			r.a.log.Warn("conditional disaggregation is on but a pool is missing", "err", err)
		}
		t.Reset(poolWarnEvery)
	}
}

// poolsAtStart is the start-up verdict on the registry: an error when it
// holds workers but not both pools, nil when it holds both or none (the
// fleet has yet to register). Run by the start gate as the state catches
// up, so that it judges the log as it stood at start-up.
func poolsAtStart(store *statestore.Store, cfg *decider.Config) error {
	if n, err := registryPools(store, cfg); n > 0 {
		return err
	}
	return nil
}

// registryPools returns how many workers the registry holds and what
// decider.CheckPools says of them.
func registryPools(store *statestore.Store, cfg *decider.Config) (n int, err error) {
	store.Read(func(v statestore.View) { n = len(v.Workers()); err = decider.CheckPools(cfg, v.Workers()) })
	return n, err
}

// How long an empty registry goes unreported, and how often it, or a pool
// still missing, is reported after that. Variables so that a test can
// shorten them.
var (
	poolWarnGrace = 10 * time.Second
	poolWarnEvery = 30 * time.Second
)

func wrap(what string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// requireTopic fails when topic does not exist: a replica that writes load
// deltas to a deployment migrate has not brought up to date would answer
// every decision 503. A broker that does not answer is not an error here:
// the appends will say so.
func requireTopic(ctx context.Context, adm *kadm.Client, topic string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return nil
	}
	if d, ok := td[topic]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("the topic %s does not exist: run `pdrouter migrate` (it creates the topics this version declares), or pass --load-deltas off", topic)
	}
	return nil
}

// requiredTopics are the topics a replica of a --load-deltas mode writes
// beyond the decisions and outcomes every deployment has had, which it
// refuses to start without.
func requiredTopics(writeDeltas bool, src statestore.Source) []events.Topic {
	var out []events.Topic
	if writeDeltas {
		out = append(out, events.TopicLoadDeltas)
	}
	if src == statestore.SourceLoadShares {
		out = append(out, events.TopicLoadShares, events.TopicForwards)
	}
	return out
}

// parseLoadDeltas reads a --load-deltas mode: whether the replica writes
// load deltas, and what its store learns peers' load from.
func parseLoadDeltas(mode string) (write bool, src statestore.Source, err error) {
	switch mode {
	case "off":
		return false, statestore.SourceDecisions, nil
	case "write":
		return true, statestore.SourceDecisions, nil
	case "apply":
		return true, statestore.SourceLoadDeltas, nil
	case "snapshots":
		return true, statestore.SourceLoadShares, nil
	}
	return false, 0, fmt.Errorf("--load-deltas %q: want off, write, apply or snapshots", mode)
}
