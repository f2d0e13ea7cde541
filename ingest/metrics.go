package ingest

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/rejects"
)

// Metrics are ingest's Prometheus metrics. They are registered on the
// Registerer passed to NewMetrics, never on a global one, so `pdrouter dev`
// can run ingest next to other components and tests can run many.
//
// The source label is events.WorkerRank(worker, dp rank) for the first
// MaxSourceLabels sources seen, and "other" for the rest: registrations and
// dp ranks come from outside, and a label per arbitrary source would grow
// the registry without bound.
type Metrics struct {
	Batches       *prometheus.CounterVec // {source}
	Events        *prometheus.CounterVec // {source,type}
	Demoted       *prometheus.CounterVec // {reason}
	DecodeErrors  *prometheus.CounterVec // {reason}
	FrameErrors   prometheus.Counter
	Gaps          *prometheus.CounterVec // {source}
	Replays       *prometheus.CounterVec // {source,result}
	Replayed      *prometheus.CounterVec // {source}
	Resets        *prometheus.CounterVec // {source,reason}
	ProduceErrors *prometheus.CounterVec // {topic}
	Produced      *prometheus.CounterVec // {topic}
	QueueDepth    *prometheus.GaugeVec   // {socket}
	Lag           prometheus.Histogram
	Scrapes       *prometheus.CounterVec // {result}
	Health        *prometheus.CounterVec // {reason}: WorkerHealth records written
	Unrouted      prometheus.Counter
	ConnPanics    *prometheus.CounterVec // {entry}
	Split         prometheus.Counter
	// Rejects is pdrouter_rejected_total, shared with the rest of the
	// process: the produce, zmq_dial, scrape and zmq_bind entries.
	Rejects *rejects.Counter

	mu sync.Mutex
	// maxSources bounds the distinct source labels; sources holds them.
	maxSources int
	sources    map[string]struct{}
}

// OtherSource is the source label of every source past the cap.
const OtherSource = "other"

// DefaultMaxSourceLabels is the default of --ingest-max-source-labels.
const DefaultMaxSourceLabels = 1024

// The reasons ingest counts in pdrouter_rejected_total, by entry.
const (
	rejectTooLarge   = "record_too_large"   // produce: over the record limit even split, or over the broker's
	rejectRefused    = "refused"            // produce: refused by the broker for another reason
	rejectNotAllowed = "not_allowed"        // zmq_dial, scrape: the endpoint is outside --engine-allow
	rejectTimeout    = "timeout"            // scrape
	rejectScrapeSize = "too_large"          // scrape: body over --scrape-max-bytes
	rejectBadStatus  = "bad_status"         // scrape
	rejectMalformed  = "malformed"          // scrape: not Prometheus text
	rejectBlockSize  = "invalid_block_size" // scrape: vllm:cache_config_info's block_size is 0 or over events.MaxBlockSize
	rejectUnknown    = "unknown_worker"     // zmq_bind: a topic no registration names
)

// SetMaxSourceLabels sets the cap on distinct source labels (n <= 0: the
// default). Labels already given keep their series.
func (m *Metrics) SetMaxSourceLabels(n int) {
	if n <= 0 {
		n = DefaultMaxSourceLabels
	}
	m.mu.Lock()
	m.maxSources = n
	m.mu.Unlock()
}

// sourceLabel returns the label under which source is counted: itself
// while there is room under the cap, OtherSource after.
func (m *Metrics) sourceLabel(source string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sources[source]; ok {
		return source
	}
	if len(m.sources) >= m.maxSources {
		return OtherSource
	}
	m.sources[source] = struct{}{}
	return source
}

// NewMetrics creates the metrics and registers them on reg (nil: not
// registered, for tests that do not look at them).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_batches_total",
			Help: "Engine batches (ZMQ messages) received, live and replayed."}, []string{"source"}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_events_total",
			Help: "Events written to kv-events, by kind (stored, removed, cleared, unknown, source_reset)."}, []string{"source", "type"}),
		Demoted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_events_demoted_total",
			Help: "Events turned into UnknownEvent because their values would make the record invalid."}, []string{"reason"}),
		DecodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_decode_errors_total",
			Help: "Engine batches that could not be decoded; each causes a source reset."}, []string{"reason"}),
		FrameErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "pdrouter_ingest_frame_errors_total",
			Help: "ZMQ messages without the [topic, seq, payload] framing."}),
		Gaps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_gaps_total",
			Help: "Sequence gaps detected on live messages."}, []string{"source"}),
		Replays: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_replays_total",
			Help: "Replay requests to engines' replay sockets, by result (complete, incomplete, failed, unavailable)."}, []string{"source", "result"}),
		Replayed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_replayed_batches_total",
			Help: "Batches recovered through replay and written."}, []string{"source"}),
		Resets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_source_resets_total",
			Help: "SourceReset events written, by reason."}, []string{"source", "reason"}),
		ProduceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_produce_errors_total",
			Help: "Records Kafka refused for good (retriable errors are retried and not counted)."}, []string{"topic"}),
		Produced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_records_produced_total",
			Help: "Records acknowledged by Kafka."}, []string{"topic"}),
		QueueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pdrouter_ingest_queue_depth",
			Help: "Messages received from a ZMQ socket and not yet handed to Kafka (bounded; full means backpressure)."}, []string{"socket"}),
		Lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pdrouter_ingest_lag_seconds",
			Help:    "From a batch's arrival on the ZMQ socket to its hand-over to the Kafka producer.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
		Scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_scrapes_total",
			Help: "Engine /metrics scrapes, by result (ok, error)."}, []string{"result"}),
		Health: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_worker_health_records_total",
			Help: "WorkerHealth records written by the scraper, by reason (scrape_failed: the worker's scrapes failed several times in a row; recovered: a scrape succeeded again, or for the first time since this process started)."}, []string{"reason"}),
		Unrouted: prometheus.NewCounter(prometheus.CounterOpts{Name: "pdrouter_ingest_unrouted_total",
			Help: "Messages on the bind endpoint whose topic names no registered worker."}),
		Split: prometheus.NewCounter(prometheus.CounterOpts{Name: "pdrouter_ingest_records_split_total",
			Help: "Engine batches too big for one Kafka record, written as several."}),
		ConnPanics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_connection_panics_total",
			Help: "Panics recovered on a ZMQ connection (entry zmq_bind or zmq_dial); each dropped that connection. Any is a bug."}, []string{"entry"}),
		Rejects:    rejects.For(reg),
		maxSources: DefaultMaxSourceLabels,
		sources:    map[string]struct{}{},
	}
	m.Rejects.Init(rejects.Produce, rejectTooLarge, rejectRefused)
	m.Rejects.Init(rejects.ZMQDial, rejectNotAllowed)
	m.Rejects.Init(rejects.Scrape, rejectNotAllowed, rejectTimeout, rejectScrapeSize, rejectBadStatus, rejectMalformed, rejectBlockSize)
	m.Rejects.Init(rejects.ZMQBind, rejectUnknown)
	m.ConnPanics.WithLabelValues(string(rejects.ZMQBind))
	m.ConnPanics.WithLabelValues(string(rejects.ZMQDial))
	for _, r := range decodeErrorReasons {
		m.DecodeErrors.WithLabelValues(r)
	}
	for _, r := range demoteReasons {
		m.Demoted.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.Scrapes.WithLabelValues(r)
	}
	for _, r := range []pb.HealthReason{pb.HealthReason_HEALTH_REASON_SCRAPE_FAILED, pb.HealthReason_HEALTH_REASON_RECOVERED} {
		m.Health.WithLabelValues(events.HealthReasonLabel(r))
	}
	if reg != nil {
		reg.MustRegister(m.Batches, m.Events, m.Demoted, m.DecodeErrors, m.FrameErrors, m.Gaps, m.Replays, m.Replayed,
			m.Resets, m.ProduceErrors, m.Produced, m.QueueDepth, m.Lag, m.Scrapes, m.Health, m.Unrouted, m.Split, m.ConnPanics)
	}
	return m
}
