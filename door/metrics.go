package door

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/internal/rejects"
)

// The label values of the door's series: fixed sets, so every series
// exists from the start and none is made from input.
var (
	endpointLabels = []string{endpointCompletions, endpointChat}
	pathLabels     = []string{pathLocal, pathRemote, pathNone}
	resultLabels   = []string{resultOK, resultError, resultCancelled, resultRejected}
)

const (
	endpointCompletions = "completions"
	endpointChat        = "chat_completions"
	pathLocal           = "local"
	pathRemote          = "remote"
	// pathNone: the request ended before a decision.
	pathNone        = "none"
	resultOK        = "ok"
	resultError     = "error"
	resultCancelled = "cancelled"
	resultRejected  = "rejected"
)

// retryReasons are the labels of pdrouter_door_retries_total: the codes of
// the failures a request is retried after, and "other", so the label set
// stays fixed whatever code a new failure gets.
var retryReasons = []string{"no_http_url", "upstream_unreachable", "upstream_error", "upstream_timeout", "upstream_malformed",
	"upstream_header_too_large", "upstream_response_too_large", retryOther}

const retryOther = "other"

// retryReason is the label of a failure's code.
func retryReason(code string) string {
	for _, r := range retryReasons[:len(retryReasons)-1] {
		if r == code {
			return r
		}
	}
	return retryOther
}

// The reasons of pdrouter_rejected_total{entry="door"}.
const (
	reasonBodyTooLarge   = "body_too_large"
	reasonInvalidJSON    = "invalid_json"
	reasonInvalidRequest = "invalid_request"
	reasonTooManyMsgs    = "too_many_messages"
	reasonTooManyTokens  = "too_many_prompt_tokens"
	reasonInFlight       = "in_flight_full"
	reasonRouterOwned    = "router_owned_field"
)

// The reasons of pdrouter_rejected_total{entry="door_upstream"}.
const (
	reasonLineTooLong    = "line_too_long"
	reasonMalformedChunk = "malformed_chunk"
	reasonRespTooLarge   = "response_too_large"
	reasonMalformedBody  = "malformed_body"
	reasonConnect        = "connect_failed"
	reasonFirstByte      = "first_byte_timeout"
	reasonTotal          = "total_timeout"
	reasonStatus         = "error_status"
	reasonHeaderTooLarge = "header_too_large"
)

type metrics struct {
	requests      *prometheus.CounterVec
	ttft          *prometheus.HistogramVec
	itl           *prometheus.HistogramVec
	added         prometheus.Histogram
	tokenize      prometheus.Histogram
	cache         *prometheus.CounterVec
	retries       *prometheus.CounterVec
	healthReports *prometheus.CounterVec
	inFlight      prometheus.Gauge
	outcomeFailed prometheus.Counter
	rejects       *rejects.Counter
}

// latencyBuckets span 1 ms to ~65 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 17)

// addedBuckets resolve what the door adds before an engine sees a request,
// which is judged against a 2 ms bar: from 100 µs to 10 ms no bucket is
// wider than twice its start and one ends at the bar, and past 10 ms they
// still reach a minute (a slow tokenize, or a decision append waiting on
// the broker).
var addedBuckets = []float64{
	0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01,
	0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_door_requests_total",
			Help: "OpenAI requests the door answered, by endpoint, path (local, remote, none: ended before a decision) and result (ok, error, cancelled: the client went away, rejected: refused before any work)."},
			[]string{"endpoint", "path", "result"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pdrouter_door_ttft_seconds",
			Help: "Time to first token as the client sees it, from the request's arrival at the door, by path.", Buckets: latencyBuckets}, []string{"path"}),
		itl: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pdrouter_door_itl_seconds",
			Help: "Mean inter-token latency of each streamed request, by path.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"path"}),
		added: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pdrouter_door_added_latency_seconds",
			Help: "What the door adds before an engine sees the request: from arrival to the first upstream request (parsing, tokenize, decision).", Buckets: addedBuckets}),
		tokenize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pdrouter_door_tokenize_seconds",
			Help: "Time to get a prompt's token ids from an engine's /tokenize (cache misses only).", Buckets: latencyBuckets}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_door_tokenize_cache_total",
			Help: "Tokenize cache lookups by result (hit, miss)."}, []string{"result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_door_retries_total",
			Help: "Requests retried on another worker after a failure before their first byte reached the client, by the failure (the cancelled outcome's error code: upstream_unreachable, upstream_error, upstream_timeout, ...; other for any code not listed)."}, []string{"reason"}),
		healthReports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_door_worker_health_reports_total",
			Help: "Workers the door could not connect to, reported as connect_refused WorkerHealth records (at most one per worker per second), by result (ok: appended, error: the append failed)."}, []string{"result"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pdrouter_door_in_flight",
			Help: "Requests the door is serving now."}),
		outcomeFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "pdrouter_door_outcome_append_failures_total",
			Help: "Outcome events the door could not append to the outcomes topic."}),
		rejects: rejects.For(reg),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.ttft, m.itl, m.added, m.tokenize, m.cache, m.retries, m.healthReports, m.inFlight, m.outcomeFailed)
	}
	for _, e := range endpointLabels {
		for _, p := range pathLabels {
			for _, r := range resultLabels {
				m.requests.WithLabelValues(e, p, r)
			}
		}
	}
	for _, p := range pathLabels[:2] {
		m.ttft.WithLabelValues(p)
		m.itl.WithLabelValues(p)
	}
	for _, r := range retryReasons {
		m.retries.WithLabelValues(r)
	}
	m.healthReports.WithLabelValues(resultOK)
	m.healthReports.WithLabelValues(resultError)
	m.cache.WithLabelValues("hit")
	m.cache.WithLabelValues("miss")
	m.rejects.Init(rejects.Door, reasonBodyTooLarge, reasonInvalidJSON, reasonInvalidRequest, reasonTooManyMsgs, reasonTooManyTokens, reasonInFlight, reasonRouterOwned)
	m.rejects.Init(rejects.DoorUpstream, reasonLineTooLong, reasonMalformedChunk, reasonRespTooLarge, reasonMalformedBody,
		reasonConnect, reasonFirstByte, reasonTotal, reasonStatus, reasonHeaderTooLarge)
	return m
}
