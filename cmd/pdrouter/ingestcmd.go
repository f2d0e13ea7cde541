package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/ingest"
	"github.com/pdrouter/pdrouter/kafkaconn"
)

// ingestFlags are the flags of `pdrouter ingest`. They are kept apart from
// the command so `serve --ingest` and `dev` can bind the same flags and
// build the same ingest.Config.
type ingestFlags struct {
	sources        []string
	configFile     string
	bind           string
	bindTopic      string
	watchWorkers   bool
	scrapeInterval time.Duration
	replayTimeout  time.Duration
	queueSize      int
	ingestID       string
	zmtp           ingest.ZMTPLimits
	maxRecordBytes int
	maxSources     int
	engineAllow    string
	scrapeTimeout  time.Duration
	scrapeConc     int
	scrapeMaxBytes int64
	scrapeFailures int
}

func (f *ingestFlags) bindFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&f.sources, "source", nil, "an engine to subscribe to, as worker=ID,endpoint=tcp://host:port[,replay=tcp://host:port][,topic=T][,dp=N][,engine=vllm|sglang|trtllm][,metrics=URL]; repeat the flag, or separate sources with ';'")
	fs.StringVar(&f.configFile, "ingest-config", "", `JSON file of engines: {"bind": ..., "bind_topic": ..., "sources": [{"worker_id", "endpoint", "replay_endpoint", "topic", "dp_size", "engine", "metrics_url"}]}`)
	fs.StringVar(&f.bind, "bind", "", "also bind a SUB socket here (e.g. tcp://0.0.0.0:5557) for engines that connect to ingest; they are told apart by topic")
	fs.StringVar(&f.bindTopic, "bind-topic", "", "subscription prefix on the --bind socket (empty: every topic)")
	fs.BoolVar(&f.watchWorkers, "watch-workers", true, "follow the workers topic: a registration with a kv_events_endpoint is enough for its events to flow")
	fs.DurationVar(&f.scrapeInterval, "scrape-interval", 5*time.Second, "how often to scrape each engine's Prometheus /metrics into load samples (0: never)")
	fs.DurationVar(&f.replayTimeout, "replay-timeout", 5*time.Second, "bound on one replay request to an engine's replay socket")
	fs.IntVar(&f.queueSize, "ingest-queue", 1024, "messages buffered per ZMQ socket before ingest stops reading it (backpressure)")
	fs.StringVar(&f.ingestID, "ingest-id", "", "name of this ingest process in every record (default: ingest@<hostname>)")
	fs.IntVar(&f.zmtp.MaxFrameBytes, "zmq-max-frame-bytes", ingest.DefaultZMQMaxFrameBytes, "largest ZMQ frame accepted from an engine (publisher or replay); a larger one drops the connection")
	fs.IntVar(&f.zmtp.MaxMessageBytes, "zmq-max-message-bytes", ingest.DefaultZMQMaxFrameBytes+ingest.DefaultZMQMessageOverhead, "largest ZMQ message (all its frames) accepted from an engine")
	fs.DurationVar(&f.zmtp.HandshakeTimeout, "zmq-handshake-timeout", ingest.DefaultZMQHandshakeTimeout, "time a ZMQ peer has to finish the ZMTP greeting and handshake")
	fs.IntVar(&f.zmtp.MaxConns, "zmq-max-conns", ingest.DefaultZMQMaxConns, "connections open at once on the --bind socket; more are closed as they arrive")
	fs.StringVar(&f.engineAllow, "engine-allow", ingest.DefaultEngineAllow, "where ingest may connect for KV events, replay and /metrics: comma-separated addresses, CIDR prefixes, host names, 'ipc' (ipc:// endpoints) or '*' (anywhere); checked on every address a name resolves to. The default is loopback and private ranges; link-local (cloud metadata) and public addresses are refused")
	fs.DurationVar(&f.scrapeTimeout, "scrape-timeout", 5*time.Second, "bound on one /metrics scrape (connect, headers and body)")
	fs.IntVar(&f.scrapeConc, "scrape-concurrency", ingest.DefaultScrapeConcurrency, "/metrics scrapes in flight at once")
	fs.Int64Var(&f.scrapeMaxBytes, "scrape-max-bytes", ingest.MaxScrapeBytes, "largest /metrics body read; a bigger one is refused, not truncated")
	fs.IntVar(&f.scrapeFailures, "scrape-failures-unhealthy", ingest.DefaultScrapeFailuresUnhealthy, "failed /metrics scrapes of a worker in a row after which ingest writes it unhealthy (a WorkerHealth record: every replica then excludes it until a scrape succeeds)")
	fs.IntVar(&f.maxRecordBytes, "max-record-bytes", ingest.DefaultMaxRecordBytes, "largest Kafka record value ingest writes; a bigger engine batch is split across records (keep it below the topics' max.message.bytes, less 4 KiB)")
	fs.IntVar(&f.maxSources, "ingest-max-source-labels", ingest.DefaultMaxSourceLabels, `distinct "source" label values of ingest's metrics; sources past it are counted as "other"`)
}

// config builds the ingest configuration from the flags and the config file.
func (f *ingestFlags) config(a *app) (ingest.Config, error) {
	cfg := ingest.Config{
		IngestID: f.ingestID, Names: a.names(), Bind: f.bind, BindTopic: f.bindTopic, WatchWorkers: f.watchWorkers,
		ScrapeInterval: f.scrapeInterval, ReplayTimeout: f.replayTimeout, QueueSize: f.queueSize, ZMTP: f.zmtp,
		MaxRecordBytes: f.maxRecordBytes, MaxSourceLabels: f.maxSources,
		EngineAllow: f.engineAllow, ScrapeTimeout: f.scrapeTimeout, ScrapeConcurrency: f.scrapeConc, ScrapeMaxBytes: f.scrapeMaxBytes,
		ScrapeFailuresUnhealthy: f.scrapeFailures,
	}
	if f.zmtp.MaxFrameBytes <= 0 || f.zmtp.MaxMessageBytes <= 0 || f.zmtp.HandshakeTimeout <= 0 || f.zmtp.MaxConns <= 0 {
		return cfg, errors.New("--zmq-max-frame-bytes, --zmq-max-message-bytes, --zmq-handshake-timeout and --zmq-max-conns must be positive")
	}
	if err := f.zmtp.Validate(); err != nil {
		return cfg, err
	}
	if f.scrapeInterval < 0 || f.replayTimeout < 0 || f.queueSize < 0 {
		return cfg, errors.New("--scrape-interval, --replay-timeout and --ingest-queue must not be negative")
	}
	if f.maxRecordBytes < 16<<10 || f.maxRecordBytes > events.MaxValueBytes {
		return cfg, fmt.Errorf("--max-record-bytes %d: want [%d, %d]", f.maxRecordBytes, 16<<10, events.MaxValueBytes)
	}
	if _, err := ingest.ParseAllowList(f.engineAllow); err != nil {
		return cfg, err
	}
	if f.scrapeTimeout <= 0 || f.scrapeConc < 1 || f.scrapeMaxBytes < 1 || f.scrapeFailures < 1 {
		return cfg, errors.New("--scrape-timeout, --scrape-concurrency, --scrape-max-bytes and --scrape-failures-unhealthy must be positive")
	}
	if f.maxSources < 1 {
		return cfg, fmt.Errorf("--ingest-max-source-labels %d: want at least 1", f.maxSources)
	}
	if f.configFile != "" {
		fc, err := ingest.LoadFile(f.configFile)
		if err != nil {
			return cfg, fmt.Errorf("--ingest-config: %w", err)
		}
		cfg.Sources = append(cfg.Sources, fc.Sources...)
		if cfg.Bind == "" {
			cfg.Bind, cfg.BindTopic = fc.Bind, fc.BindTopic
		}
	}
	for _, v := range f.sources {
		for _, one := range strings.Split(v, ";") {
			if strings.TrimSpace(one) == "" {
				continue
			}
			s, err := ingest.ParseSourceFlag(one)
			if err != nil {
				return cfg, err
			}
			cfg.Sources = append(cfg.Sources, s)
		}
	}
	seen := map[string]bool{}
	for _, s := range cfg.Sources {
		if seen[s.WorkerID] {
			return cfg, fmt.Errorf("worker %q is given twice (flags and --ingest-config together)", s.WorkerID)
		}
		seen[s.WorkerID] = true
	}
	if len(cfg.Sources) == 0 && cfg.Bind == "" && !cfg.WatchWorkers {
		return cfg, errors.New("nothing to ingest: give --source, --ingest-config, --bind or --watch-workers")
	}
	return cfg, nil
}

func newIngestCmd(a *app) *cobra.Command {
	var (
		f    ingestFlags
		cell string
	)
	cmd := &cobra.Command{
		Use:   "ingest",
		Short: "Read engines' KV events and load into Kafka",
		Long: `ingest subscribes to the KV-cache event publishers of vLLM, SGLang and
TensorRT-LLM engines (ZeroMQ), decodes every wire shape they emit, and writes
the normalized events, with the raw bytes, to the kv-events topic keyed by
worker. Gaps are filled from the engines' replay sockets; a restart or a
hole that cannot be filled writes a source reset, so replicas drop that
worker's stale blocks. It also scrapes each engine's /metrics into load
samples, and keeps registrations on workers current with the block size and
capacity the engine reports. Its own metrics are served on --http-addr.

Engines come from --source flags, --ingest-config, registrations on the
workers topic (--watch-workers), and --bind for engines that connect.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.kafka.Embedded() {
				return fmt.Errorf("ingest needs --brokers (PDR_BROKERS); the dev broker listens on 127.0.0.1:%d by default", defaultDevKafkaPort)
			}
			cfg, err := f.config(a)
			if err != nil {
				return err
			}
			if cfg.Cell, err = events.ParseCell(cell); err != nil {
				return fmt.Errorf("--cell: %w", err)
			}
			if err := a.tuneMemory(); err != nil {
				return err
			}
			opts, err := a.kafkaOpts("ingest")
			if err != nil {
				return err
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			cl, err := kgo.NewClient(append(slices.Clone(opts), append(ingest.ProducerOpts(cfg.MaxRecordBytes), kafkaconn.Metrics(reg, "ingest"))...)...)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			if a.httpAddr != "" {
				stop, err := ingestServeMetrics(ctx, a.httpAddr, reg)
				if err != nil {
					return err
				}
				defer stop()
			}
			a.log.Info("ingest starting", "sources", len(cfg.Sources), "bind", cfg.Bind, "watch_workers", cfg.WatchWorkers,
				"scrape_interval", cfg.ScrapeInterval, "http_addr", a.httpAddr)
			return ingest.Run(ctx, cfg, ingest.Deps{Kafka: cl, KafkaOpts: opts, Registerer: reg, Log: a.log})
		},
	}
	f.bindFlags(cmd.Flags())
	cmd.Flags().StringVar(&cell, "cell", "0/1", "with --watch-workers, read only the engines of the workers in this cell of the log, i/n (as serve --cell)")
	return cmd
}

// ingestServeMetrics serves /metrics of reg on addr until stop is called.
func ingestServeMetrics(ctx context.Context, addr string, reg *prometheus.Registry) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() { _ = srv.Serve(l) }()
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
