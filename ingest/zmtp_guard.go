package ingest

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/internal/rejects"
)

// connGuard is what every tcp:// and ipc:// ZMQ connection of ingest goes
// through: its limits, the count of what its peer got refused for, and a
// recover, so that a bug reached by a peer's bytes costs that peer its
// connection and never the process.
type connGuard struct {
	limits  ZMTPLimits
	rejects *rejects.Counter
	// panics counts recovered panics by entry (nil: not counted).
	panics *prometheus.CounterVec
	log    *slog.Logger
}

func newConnGuard(lim ZMTPLimits, rej *rejects.Counter, panics *prometheus.CounterVec, log *slog.Logger) *connGuard {
	rej.Init(rejects.ZMQBind, zmtpReasons...)
	rej.Init(rejects.ZMQDial, zmtpReasons...)
	return &connGuard{limits: lim.withDefaults(), rejects: rej, panics: panics, log: log}
}

// defaultGuard is the guard of a ZMQReplayer built without one: default
// limits, refusals counted nowhere.
func defaultGuard() *connGuard {
	return newConnGuard(ZMTPLimits{}, rejects.For(nil), nil, slog.Default())
}

// refused counts err if it is a refusal of the peer's input, and reports
// whether it was.
func (g *connGuard) refused(entry rejects.Entry, err error) bool {
	reason := zmtpReason(err)
	if reason == "" {
		return false
	}
	g.rejects.Inc(entry, reason)
	return true
}

// errConnPanic marks a connection that ended in a recovered panic.
var errConnPanic = errors.New("ingest: recovered panic on a ZMQ connection")

// run runs fn, the work of one connection to or from endpoint. A panic in
// it is recovered, logged with the endpoint and the stack, counted, and
// returned as an error wrapping errConnPanic; the caller drops the
// connection as after any other error.
func (g *connGuard) run(entry rejects.Entry, endpoint string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			g.log.Error("recovered a panic on a ZMQ connection; dropping it", "entry", string(entry), "endpoint", endpoint,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if g.panics != nil {
				g.panics.WithLabelValues(string(entry)).Inc()
			}
			err = fmt.Errorf("%w (%s): %v", errConnPanic, endpoint, p)
		}
	}()
	return fn()
}
