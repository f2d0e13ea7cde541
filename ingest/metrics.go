package ingest

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/internal/rejects"
)

// Metrics are ingest's Prometheus metrics. They are registered on the
// Registerer passed to NewMetrics, never on a global one, so `pdrouter dev`
// can run ingest next to other components and tests can run many.
//
// The source label is events.WorkerRank(worker, dp rank): bounded by the
// fleet size.
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
	Unrouted      prometheus.Counter
	ConnPanics    *prometheus.CounterVec // {entry}
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
		Unrouted: prometheus.NewCounter(prometheus.CounterOpts{Name: "pdrouter_ingest_unrouted_total",
			Help: "Messages on the bind endpoint whose topic maps to no valid worker id."}),
		ConnPanics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_ingest_connection_panics_total",
			Help: "Panics recovered on a ZMQ connection (entry zmq_bind or zmq_dial); each dropped that connection. Any is a bug."}, []string{"entry"}),
	}
	m.ConnPanics.WithLabelValues(string(rejects.ZMQBind))
	m.ConnPanics.WithLabelValues(string(rejects.ZMQDial))
	if reg != nil {
		reg.MustRegister(m.Batches, m.Events, m.Demoted, m.DecodeErrors, m.FrameErrors, m.Gaps, m.Replays, m.Replayed,
			m.Resets, m.ProduceErrors, m.Produced, m.QueueDepth, m.Lag, m.Scrapes, m.Unrouted, m.ConnPanics)
	}
	return m
}
