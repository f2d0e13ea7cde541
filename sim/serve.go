package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/internal/rejects"
)

// serveAPI starts e's HTTP server (vLLM's OpenAI API and /metrics) on host,
// on an ephemeral port, and records where it listens (named in its P/D
// answers). pub, when not nil, publishes e's KV events.
func (f *Fleet) serveAPI(e *Engine, pub *Publisher, live *liveLoop, host string, maxBody int64, rj *rejects.Counter, log *slog.Logger) (*engineServer, error) {
	ec := e.cfg
	ms := NewMetricsHandler(ec.Model, ec.BlockSize, ec.NumBlocks, 0)
	es, err := startEngineServer(net.JoinHostPort(host, "0"), f, e, live, ms, maxBody, rj, log)
	if err != nil {
		return nil, err
	}
	h, port := es.hostPort()
	f.outs[e] = &engineOutputs{pub: pub, metrics: ms, host: h, port: port}
	f.updateMetrics(e)
	return es, nil
}

// Engines is a fleet's engines serving their OpenAI API on their own, with no
// router, workload or KV event sockets: what a client or a proxy in front of
// them (the door's benchmark) talks to.
type Engines struct {
	// URLs are the engines' base URLs (their http_url), by worker id.
	URLs  map[string]string
	Model string
	stop  func()

	// What Kill and Restart need: the fleet, its loop, and each engine's
	// server by worker id.
	f       *Fleet
	live    *liveLoop
	rejects *rejects.Counter
	log     *slog.Logger
	mu      sync.Mutex
	servers map[string]*engineServer
	engines map[string]*Engine
}

// ServeEngines starts the engines of fc on 127.0.0.1, serving until Close,
// on the simulated clock at timeScale simulated seconds per wall second.
func ServeEngines(fc FleetConfig, timeScale float64, log *slog.Logger) (*Engines, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if timeScale <= 0 {
		timeScale = 1
	}
	f, err := NewFleet(fc, noRouter{}, log)
	if err != nil {
		return nil, err
	}
	live := newLiveLoop(timeScale)
	f.live = live
	f.wallTS = func() float64 { return float64(time.Now().UnixNano()) / 1e9 }
	rj := rejects.For(nil)
	out := &Engines{URLs: map[string]string{}, Model: f.cfg.Hardware.ModelName, f: f, live: live, rejects: rj, log: log,
		servers: map[string]*engineServer{}, engines: map[string]*Engine{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	out.stop = func() {
		cancel()
		<-done
		live.stop()
		out.mu.Lock()
		defer out.mu.Unlock()
		for _, s := range out.servers {
			_ = s.Close()
		}
	}
	for _, e := range f.engines {
		es, err := f.serveAPI(e, nil, live, "127.0.0.1", DefaultMaxBodyBytes, rj, log)
		if err != nil {
			close(done)
			out.stop()
			return nil, err
		}
		out.servers[e.cfg.ID], out.engines[e.cfg.ID] = es, e
		out.URLs[e.cfg.ID] = es.URL()
	}
	go func() { defer close(done); f.serve(ctx) }()
	return out, nil
}

// Close stops the engines.
func (e *Engines) Close() { e.stop() }

// Kill stops engine id's HTTP server at once, open streams cut: its port
// then refuses connections, as a crashed engine's does. Its simulated state
// is kept, for Restart.
func (e *Engines) Kill(id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.servers[id]
	if s == nil {
		return fmt.Errorf("sim: no running engine %q", id)
	}
	delete(e.servers, id)
	return s.srv.Close()
}

// Restart serves a killed engine again on the address it had (its
// registration's http_url stays right).
func (e *Engines) Restart(id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	eng := e.engines[id]
	if eng == nil || e.servers[id] != nil {
		return fmt.Errorf("sim: engine %q is not a killed engine", id)
	}
	addr := strings.TrimPrefix(e.URLs[id], "http://")
	s, err := startEngineServer(addr, e.f, eng, e.live, e.f.outs[eng].metrics, DefaultMaxBodyBytes, e.rejects, e.log)
	if err != nil {
		return err
	}
	e.servers[id] = s
	return nil
}

// noRouter is the router of a fleet that only serves its engines' API: no
// workload of its own is ever routed.
type noRouter struct{}

func (noRouter) Route(context.Context, *Request, []uint32) (Decision, error) {
	return Decision{}, errNoRouter
}
func (noRouter) PrefillDone(context.Context, *Request, time.Duration)    {}
func (noRouter) Completed(context.Context, *Request, int, time.Duration) {}

var errNoRouter = errors.New("sim: this fleet only serves its engines' API")
