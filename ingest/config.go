package ingest

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Config is what Run needs besides its dependencies.
type Config struct {
	// IngestID names this process in every record (KvSource.ingest_id).
	IngestID string
	Names    events.Names

	// Sources are engines (or engines' topics, for Bind) known up front.
	Sources []SourceConfig
	// Bind, if set, is an endpoint ingest binds a SUB on, for engines that
	// connect (vLLM connects when its endpoint has no wildcard).
	Bind string
	// BindTopic is the subscription prefix on the Bind endpoint ("" = all).
	BindTopic string
	// WatchWorkers follows the workers topic: registrations with a
	// kv_events_endpoint become sources, tombstones remove them.
	WatchWorkers bool
	// Cell limits WatchWorkers to the workers of one cell of the log
	// (events.Cell): each cell's ingest then reads its own engines, and no
	// engine is read twice. The zero value is every worker.
	Cell events.Cell

	// ReplayTimeout bounds one replay request (default 5s).
	ReplayTimeout time.Duration
	// ReconnectInterval is the pause between dial attempts (default 1s).
	ReconnectInterval time.Duration
	// QueueSize bounds the messages read from a socket and not yet written
	// (default 1024). Full means backpressure, not memory growth.
	QueueSize int

	// ScrapeInterval is how often each source's metrics URL is scraped
	// (0: never).
	ScrapeInterval time.Duration
	// ScrapeTimeout bounds one scrape (default: the interval, at most 10s).
	ScrapeTimeout time.Duration
	// ScrapeFailuresUnhealthy is how many scrapes of a worker in a row must
	// fail before ingest writes that it is unhealthy (health.go; default
	// DefaultScrapeFailuresUnhealthy).
	ScrapeFailuresUnhealthy int

	// ZMTP bounds every tcp:// and ipc:// ZMQ peer: publishers on Bind or
	// dialed, and replay sockets.
	ZMTP ZMTPLimits
	// ScrapeConcurrency bounds the scrapes in flight (default 8).
	ScrapeConcurrency int
	// ScrapeMaxBytes bounds a /metrics body (default MaxScrapeBytes).
	ScrapeMaxBytes int64
	// EngineAllow is the --engine-allow list of where ingest may connect
	// (ParseAllowList; "" is DefaultEngineAllow).
	EngineAllow string

	// MaxRecordBytes bounds a record value written to Kafka (default
	// DefaultMaxRecordBytes); bigger engine batches are split. Keep it
	// below the topics' max.message.bytes, less recordOverheadBytes.
	MaxRecordBytes int
	// MaxSourceLabels bounds the distinct source labels of ingest's
	// metrics (default DefaultMaxSourceLabels).
	MaxSourceLabels int
}

func (c *Config) defaults() {
	if c.ReplayTimeout <= 0 {
		c.ReplayTimeout = 5 * time.Second
	}
	if c.ReconnectInterval <= 0 {
		c.ReconnectInterval = time.Second
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 1024
	}
	if c.ScrapeTimeout <= 0 {
		c.ScrapeTimeout = min(c.ScrapeInterval, 10*time.Second)
	}
	if c.ScrapeFailuresUnhealthy <= 0 {
		c.ScrapeFailuresUnhealthy = DefaultScrapeFailuresUnhealthy
	}
	c.ZMTP.defaults()
	if c.ScrapeConcurrency <= 0 {
		c.ScrapeConcurrency = DefaultScrapeConcurrency
	}
	if c.ScrapeMaxBytes <= 0 {
		c.ScrapeMaxBytes = MaxScrapeBytes
	}
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if c.MaxSourceLabels <= 0 {
		c.MaxSourceLabels = DefaultMaxSourceLabels
	}
	if c.IngestID == "" {
		h, _ := os.Hostname()
		c.IngestID = "ingest@" + h
	}
}

// maxDPSize bounds a source's data-parallel ranks.
const maxDPSize = 1024

// DefaultScrapeConcurrency is the default of --scrape-concurrency.
const DefaultScrapeConcurrency = 8

// SourceConfig describes one engine: a worker with one publisher per
// data-parallel rank.
type SourceConfig struct {
	WorkerID string `json:"worker_id"`
	// Endpoint is where the engine's rank-0 PUB listens and ingest dials
	// (tcp://10.0.0.5:5557). Rank r is at the port plus r. Empty means the
	// engine connects to the Bind endpoint and is recognized by Topic.
	Endpoint string `json:"endpoint,omitempty"`
	// Replay is the engine's rank-0 replay ROUTER; empty if it has none
	// (then gaps cannot be filled and become resets).
	Replay string `json:"replay_endpoint,omitempty"`
	// Topic is the subscription prefix (connect) or the exact topic that
	// identifies the engine on the Bind endpoint.
	Topic string `json:"topic,omitempty"`
	// DPSize is the number of data-parallel ranks (0 means 1).
	DPSize int `json:"dp_size,omitempty"`
	// Engine is vllm (default), sglang, trtllm or sim.
	Engine string `json:"engine,omitempty"`
	// MetricsURL is the engine's Prometheus endpoint, for load samples.
	MetricsURL string `json:"metrics_url,omitempty"`
}

// ParseEngine maps a config engine name to the schema's enum.
func ParseEngine(s string) (pb.Engine, error) {
	switch strings.ToLower(s) {
	case "", "vllm":
		return pb.Engine_ENGINE_VLLM, nil
	case "sglang":
		return pb.Engine_ENGINE_SGLANG, nil
	case "trtllm", "tensorrt-llm", "tensorrt_llm":
		return pb.Engine_ENGINE_TRTLLM, nil
	case "sim":
		return pb.Engine_ENGINE_SIM, nil
	}
	return 0, fmt.Errorf("engine %q: want vllm, sglang, trtllm or sim", s)
}

// Validate checks one source description.
func (s SourceConfig) Validate() error {
	if err := events.ValidateWorkerID(s.WorkerID); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if _, err := ParseEngine(s.Engine); err != nil {
		return fmt.Errorf("source %s: %w", s.WorkerID, err)
	}
	if s.DPSize < 0 || s.DPSize > maxDPSize {
		return fmt.Errorf("source %s: dp_size %d out of range [0, %d]", s.WorkerID, s.DPSize, maxDPSize)
	}
	if s.Endpoint == "" && s.Topic == "" {
		return fmt.Errorf("source %s: give an endpoint to connect to, or the topic it publishes to the bind endpoint", s.WorkerID)
	}
	for what, ep := range map[string]string{"endpoint": s.Endpoint, "replay_endpoint": s.Replay} {
		if ep == "" {
			continue
		}
		if err := checkEndpoint("source "+s.WorkerID+" "+what, ep); err != nil {
			return err
		}
		if strings.Contains(ep, "*") {
			return fmt.Errorf("source %s: %s %q is the engine's bind address: give the host ingest should dial", s.WorkerID, what, ep)
		}
		for r := 0; r < max(s.DPSize, 1); r++ {
			if _, err := OffsetEndpoint(ep, r); err != nil {
				return fmt.Errorf("source %s: %w", s.WorkerID, err)
			}
		}
	}
	return nil
}

// specs expands a source into one spec per DP rank.
func (s SourceConfig) specs() ([]sourceSpec, error) {
	eng, err := ParseEngine(s.Engine)
	if err != nil {
		return nil, err
	}
	var out []sourceSpec
	for r := 0; r < max(s.DPSize, 1); r++ {
		ep, err := OffsetEndpoint(s.Endpoint, r)
		if err != nil {
			return nil, err
		}
		rp, err := OffsetEndpoint(s.Replay, r)
		if err != nil {
			return nil, err
		}
		out = append(out, sourceSpec{Worker: s.WorkerID, DPRank: uint32(r), Engine: eng, Endpoint: ep, Replay: rp})
	}
	return out, nil
}

// FileConfig is the JSON config file of `pdrouter ingest --config`:
//
//	{"bind": "tcp://0.0.0.0:5557", "bind_topic": "",
//	 "sources": [{"worker_id": "decode-1", "endpoint": "tcp://10.0.0.5:5557",
//	              "replay_endpoint": "tcp://10.0.0.5:5558", "dp_size": 2,
//	              "engine": "vllm", "metrics_url": "http://10.0.0.5:8000/metrics"}]}
type FileConfig struct {
	Bind      string         `json:"bind,omitempty"`
	BindTopic string         `json:"bind_topic,omitempty"`
	Sources   []SourceConfig `json:"sources"`
}

// LoadFile reads a FileConfig, rejecting unknown keys so a typo is not a
// silently ignored engine.
func LoadFile(path string) (FileConfig, error) {
	var fc FileConfig
	f, err := os.Open(path)
	if err != nil {
		return fc, err
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fc); err != nil {
		return fc, fmt.Errorf("%s: %w", path, err)
	}
	for i, s := range fc.Sources {
		if err := s.Validate(); err != nil {
			return fc, fmt.Errorf("%s: sources[%d]: %w", path, i, err)
		}
	}
	return fc, nil
}

// ParseSourceFlag parses the --source flag's value: comma-separated
// key=value pairs, keys worker, endpoint, replay, topic, dp, engine,
// metrics; for example
//
//	worker=decode-1,endpoint=tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558,dp=2
func ParseSourceFlag(v string) (SourceConfig, error) {
	var s SourceConfig
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return s, fmt.Errorf("--source %q: %q is not key=value", v, kv)
		}
		switch k {
		case "worker":
			s.WorkerID = val
		case "endpoint":
			s.Endpoint = val
		case "replay":
			s.Replay = val
		case "topic":
			s.Topic = val
		case "dp":
			n, err := strconv.Atoi(val)
			if err != nil {
				return s, fmt.Errorf("--source %q: dp %q is not a number", v, val)
			}
			s.DPSize = n
		case "engine":
			s.Engine = val
		case "metrics":
			s.MetricsURL = val
		default:
			return s, fmt.Errorf("--source %q: unknown key %q (want worker, endpoint, replay, topic, dp, engine, metrics)", v, k)
		}
	}
	return s, s.Validate()
}
