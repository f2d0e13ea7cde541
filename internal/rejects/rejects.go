// Package rejects counts input that pdrouter refuses where it enters the
// process: HTTP bodies, ZMTP peers, scraped metrics, engine endpoints named by
// registrations, and records ingest could not write.
//
// Every boundary counts into one series family,
// pdrouter_rejected_total{entry,reason}, so one alert and one dashboard panel
// cover all of them. Both labels are bounded: entry is one of the Entry
// constants below, and each boundary declares its reasons up front with Init,
// which also makes every series exist at 0 from the start (an alert on a rate
// must see the zero, not nothing).
package rejects

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Entry names a boundary where input enters the process.
type Entry string

// The boundaries. A new one is added here, never made up at a call site, so
// the entry label stays bounded.
const (
	// HTTP is the API: bodies, headers, paths and query parameters.
	HTTP Entry = "http"
	// ZMQBind is ingest's bound SUB socket (--bind): any peer that can
	// reach the port.
	ZMQBind Entry = "zmq_bind"
	// ZMQDial is an engine endpoint that ingest dials because a
	// registration names it (KV events and replay).
	ZMQDial Entry = "zmq_dial"
	// Scrape is a worker's metrics_url, fetched by ingest.
	Scrape Entry = "scrape"
	// Produce is a record that ingest built but the broker would refuse
	// (or did refuse).
	Produce Entry = "produce"
	// Registration is a worker registration refused by a limit that only
	// the whole fleet's state can check (the worker cap), at the API or
	// on apply.
	Registration Entry = "registration"
	// Door is the OpenAI-compatible front door's client side: bodies,
	// messages, prompts and the in-flight bound.
	Door Entry = "door"
	// DoorUpstream is what an engine answers the door: an engine is a peer
	// the door trusts no more than a client (line lengths, chunk shapes,
	// body sizes, timeouts).
	DoorUpstream Entry = "door_upstream"
	// SimHTTP is the OpenAI-compatible API of a simulated engine (package
	// sim): a test fixture, but one that any local client can reach.
	SimHTTP Entry = "sim_http"
)

// MetricName is the name of the series family.
const MetricName = "pdrouter_rejected_total"

// Counter is the pdrouter_rejected_total family of one registry.
type Counter struct {
	vec *prometheus.CounterVec
}

var (
	mu       sync.Mutex
	byRegist = map[prometheus.Registerer]*Counter{}
)

// For returns the Counter registered on reg, registering it on first use. The
// API and ingest share one registry in `serve --ingest` and `dev`, and each
// asks For its own; both get the same family. A nil reg gives a Counter that
// counts but is exported nowhere (tools and tests).
func For(reg prometheus.Registerer) *Counter {
	mu.Lock()
	defer mu.Unlock()
	if c, ok := byRegist[reg]; ok && reg != nil {
		return c
	}
	c := &Counter{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricName,
		Help: "Input refused where it enters the process, by entry point (http, zmq_bind, zmq_dial, scrape, produce, registration, door, door_upstream, sim_http) and reason.",
	}, []string{"entry", "reason"})}
	if reg == nil {
		return c
	}
	if err := reg.Register(c.vec); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err) // a conflicting family of the same name: a programming error
		}
		c.vec = are.ExistingCollector.(*prometheus.CounterVec)
	}
	byRegist[reg] = c
	return c
}

// Init makes the series of entry's reasons exist at 0.
func (c *Counter) Init(entry Entry, reasons ...string) {
	for _, r := range reasons {
		c.vec.WithLabelValues(string(entry), r)
	}
}

// Inc counts one refusal. reason must be one of a fixed set that the caller
// declared with Init: never a value taken from the input.
func (c *Counter) Inc(entry Entry, reason string) {
	c.vec.WithLabelValues(string(entry), reason).Inc()
}

// Value reads one series, for tests and progress logs.
func (c *Counter) Value(entry Entry, reason string) float64 {
	var m dto.Metric
	_ = c.vec.WithLabelValues(string(entry), reason).Write(&m)
	return m.GetCounter().GetValue()
}
