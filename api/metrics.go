package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// metrics of the API. Label values are bounded: mode, reason and policy are
// the decider's fixed enumerations; route is the registered path template;
// code is the HTTP status.
type metrics struct {
	decisions     *prometheus.CounterVec
	decisionSecs  prometheus.Histogram
	effISL        prometheus.Histogram
	requests      *prometheus.CounterVec
	requestSecs   *prometheus.HistogramVec
	auditFailures prometheus.Counter
	auditSecs     prometheus.Histogram
	idempotent    prometheus.Counter
	auditInFlight prometheus.Gauge
	recordReads   *prometheus.CounterVec
	delayCharges  *prometheus.HistogramVec
	// logSearches and logSearchRecords: searches of the decisions topic
	// for a decision the state does not hold (decisionsearch.go).
	logSearches      *prometheus.CounterVec
	logSearchRecords prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_decisions_total",
			Help: "Routing decisions answered, by mode, reason code and policy.",
		}, []string{"mode", "reason", "policy"}),
		decisionSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pdrouter_decision_duration_seconds",
			Help:    "Time to decide (hashing, state read and decider), excluding the audit append.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2.5, 12),
		}),
		effISL: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pdrouter_effective_isl_tokens",
			Help:    "Effective ISL (uncached prompt tokens on the chosen decode worker) of each decision.",
			Buckets: prometheus.ExponentialBuckets(16, 2, 14),
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_http_requests_total",
			Help: "HTTP requests by route template, method and status code.",
		}, []string{"route", "method", "code"}),
		requestSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pdrouter_http_request_duration_seconds",
			Help:    "HTTP request latency by route template.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 3, 11),
		}, []string{"route"}),
		auditFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdrouter_audit_append_failures_total",
			Help: "Decisions that could not be made durable on the decisions topic (answered 503, never returned).",
		}),
		auditSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pdrouter_audit_append_duration_seconds",
			Help:    "Time to make a decision durable on the decisions topic (acks=all).",
			Buckets: prometheus.ExponentialBuckets(1e-4, 2.5, 14),
		}),
		idempotent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdrouter_route_idempotent_replays_total",
			Help: "Route requests answered with an earlier decision for the same request_id.",
		}),
		auditInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pdrouter_audit_appends_in_flight",
			Help: "Appends to the decisions topic in flight: decisions made and not yet durable, each held by a request that has not been answered (the append is synchronous).",
		}),
		recordReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_decision_record_reads_total",
			Help: "Whole decision records read back from the decisions topic (the store keeps headers), by lookup (position: at the position the store holds; search: by decode worker and decided_at, for a decision known without its position) and result: ok, gone (past the topic's retention), not_found and limit (search only: the record is not where its time places it, or the search reached its bounds first) or error.",
		}, []string{"lookup", "result"}),
		logSearches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_decision_log_searches_total",
			Help: "Lookups by id of a decision this replica's state does not hold (GET /v1/decisions/{id} and its explain), by result: found and not_found (the decisions topic searched on every partition around the time in the id), limited (a partition's record or byte bound, or the search's deadline, came first), busy (the most searches that run at once were running), refused (answered without a search: a malformed id, one stamped in the future or before the topic's retention, or no reader) or error.",
		}, []string{"result"}),
		logSearchRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pdrouter_decision_log_search_records",
			Help:    "Records each search of the decisions topic for a decision read, over every partition, whatever its result.",
			Buckets: prometheus.ExponentialBuckets(1, 10, 7),
		}),
	}
	m.delayCharges = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "pdrouter_slo_delay_charge",
		Help: "The slo policy's delay charge of each path, per warm decision: the goodput (in requests) its prefill " +
			"was expected to cost the requests queued behind it (docs/slo-policy.md). Large local charges mean " +
			"decode workers the policy keeps long prompts off; large remote ones, a prefill pool it relieves.",
		Buckets: []float64{0.001, 0.01, 0.03, 0.1, 0.3, 1, 3, 10},
	}, []string{"path"})
	for _, r := range []string{"ok", "gone", "error"} {
		m.recordReads.WithLabelValues(lookupPosition, r)
	}
	for _, r := range []string{"ok", "gone", "not_found", "limit", "error"} {
		m.recordReads.WithLabelValues(lookupSearch, r)
	}
	for _, p := range []string{"local", "remote"} {
		m.delayCharges.WithLabelValues(p)
	}
	for _, r := range searchResults {
		m.logSearches.WithLabelValues(r)
	}
	reg.MustRegister(m.decisions, m.decisionSecs, m.effISL, m.requests, m.requestSecs, m.auditFailures, m.auditSecs,
		m.idempotent, m.auditInFlight, m.recordReads, m.delayCharges, m.logSearches, m.logSearchRecords)
	return m
}

// observeDecision counts a decision made durable: its mode and reason, its
// effective ISL and, for a warm slo decision, its delay charges.
func (m *metrics) observeDecision(rec *pb.DecisionRecord) {
	m.decisions.WithLabelValues(rec.GetMode(), rec.GetReason(), rec.GetPolicy()).Inc()
	m.effISL.Observe(float64(rec.GetEffectiveIsl()))
	if s := rec.GetSlo(); s.GetWarm() {
		m.delayCharges.WithLabelValues("local").Observe(s.GetLocalDelayCharge())
		m.delayCharges.WithLabelValues("remote").Observe(s.GetRemoteDelayCharge())
	}
}

// initDecisions creates every series of pdrouter_decisions_total this server
// can count, at 0: each outcome of the decider under its one policy, so a
// dashboard or an alert on a rare reason sees 0 before the first decision
// rather than nothing.
func (m *metrics) initDecisions(policy decider.Policy) {
	for _, o := range decider.Outcomes() {
		m.decisions.WithLabelValues(string(o.Mode), string(o.Reason), string(policy))
	}
}
