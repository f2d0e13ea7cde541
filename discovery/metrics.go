package discovery

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/discovery/workerspec"
)

// metrics are the pdrouter_discovery_* series. Every label value is from a
// fixed set, and every series exists at 0 from the start.
type metrics struct {
	refused    *prometheus.CounterVec // annotation
	requests   *prometheus.CounterVec // op, result
	workers    prometheus.Gauge
	reconciles *prometheus.CounterVec // result
	removed    prometheus.Counter
}

// The op and result label values of pdrouter_discovery_requests_total.
const (
	opRegister   = "register"
	opDeregister = "deregister"
	opList       = "list"

	resultOK = "ok"
	// resultRefused is a 4xx the same request would get again.
	resultRefused = "refused"
	// resultError is anything else: the router unreachable, a 5xx, a
	// too_many_workers; the request is retried.
	resultError = "error"
)

// newMetrics makes the series and registers them with reg (none when nil).
// A registry that has them already is an error, not a panic.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_discovery_refused_total",
			Help: "Pods not registered because an annotation (or the pod's IP or name: annotation=\"pod\"; a key under pdrouter.io/ that is not known: \"unknown\") was refused; counted once per distinct error of a pod.",
		}, []string{"annotation"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_discovery_requests_total",
			Help: "Requests to the router's API by operation (register, deregister, list) and result (ok, refused: a 4xx that will not change, error: retried).",
		}, []string{"op", "result"}),
		workers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pdrouter_discovery_workers",
			Help: "Workers this process registered and has not removed.",
		}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_discovery_reconciles_total",
			Help: "Reconciles of the router's worker list with the pods, by result (ok, error).",
		}, []string{"result"}),
		removed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdrouter_discovery_stale_removed_total",
			Help: "Workers under this watcher's id prefix that a reconcile removed because no eligible pod has their id.",
		}),
	}
	for _, a := range append([]string{workerspec.Unknown, workerspec.Pod}, workerspec.Known()...) {
		m.refused.WithLabelValues(a)
	}
	for _, op := range []string{opRegister, opDeregister, opList} {
		for _, r := range []string{resultOK, resultRefused, resultError} {
			m.requests.WithLabelValues(op, r)
		}
	}
	for _, r := range []string{resultOK, resultError} {
		m.reconciles.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.refused, m.requests, m.workers, m.reconciles, m.removed} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("discovery metrics: %w", err)
			}
		}
	}
	return m, nil
}

// request counts one request to the router by the error it ended with.
func (m *metrics) request(op string, err error) {
	m.requests.WithLabelValues(op, resultOf(err)).Inc()
}
