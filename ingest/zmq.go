package ingest

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/pdrouter/pdrouter/internal/rejects"
)

// tcp:// and ipc:// endpoints are read with ingest's own ZMTP connections
// (zmtp_conn.go, subconn.go), behind a connGuard. inproc:// endpoints use
// go-zeromq's pure-Go sockets: they only reach code in this process.
// TestZMQInteropPyzmq checks the wire against libzmq through pyzmq.

// ZMQLogger routes go-zeromq's *log.Logger into lg at Debug: it writes a
// line on every dial attempt that fails and every refused connection,
// which ingest reports itself, once and at Warn, so its lines are detail
// for whoever turns Debug on, not noise on stderr and not lost.
func ZMQLogger(lg *slog.Logger) *log.Logger {
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return slog.NewLogLogger(lg.With("component", "zmq").Handler(), slog.LevelDebug)
}

// received is one message off a socket, with its arrival time.
type received struct {
	msg Message
	at  time.Time
}

// msgReceiver is what recvLoop reads: a subConn, or go-zeromq's socket for
// inproc:// endpoints.
type msgReceiver interface {
	Recv() ([][]byte, error)
}

// socketReceiver reads go-zeromq's socket as a msgReceiver.
type socketReceiver struct{ s zmq4.Socket }

func (r socketReceiver) Recv() ([][]byte, error) {
	m, err := r.s.Recv()
	return m.Frames, err
}

// subscribeConnect dials an engine's PUB at endpoint and calls out for every
// well-framed message until ctx ends. A lost connection (engine restart),
// a refused handshake or frame, or a recovered panic is redialed after
// retry; a missed stretch shows up as a sequence gap or restart
// downstream. Badly framed messages go to bad.
func subscribeConnect(ctx context.Context, endpoint, topic string, retry time.Duration, g *connGuard,
	out func(received) error, bad func(error), connected func() error) error {
	dial := func() (msgReceiver, func() error, error) {
		sc, err := dialSub(ctx, endpoint, topic, g.limits)
		if err != nil {
			return nil, nil, err
		}
		return sc, sc.Close, nil
	}
	if _, _, ok := netEndpoint(endpoint); !ok {
		dial = func() (msgReceiver, func() error, error) { return dialSocket(ctx, endpoint, topic, retry, g.log) }
	}
	lg := g.log
	failures := 0
	for ctx.Err() == nil {
		var (
			rx      msgReceiver
			closeRx func() error
		)
		err := g.run(rejects.ZMQDial, endpoint, func() (err error) { rx, closeRx, err = dial(); return err })
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, errSubscribe) {
				return err
			}
			// Logged once per outage: an engine that is down is redialed
			// every retry, quietly; a refused peer is counted every time.
			g.refused(rejects.ZMQDial, err)
			level := slog.LevelDebug
			if failures == 0 {
				level = slog.LevelWarn
			}
			failures++
			lg.Log(ctx, level, "cannot connect to engine publisher; retrying", "endpoint", endpoint, "err", err)
			sleepCtx(ctx, retry)
			continue
		}
		failures = 0
		lg.Debug("connected to engine publisher", "endpoint", endpoint, "topic", topic)
		if err := connected(); err != nil {
			_ = closeRx()
			return nil
		}
		stop := context.AfterFunc(ctx, func() { _ = closeRx() })
		err = g.run(rejects.ZMQDial, endpoint, func() error { return recvLoop(ctx, rx, out, bad) })
		stop()
		_ = closeRx()
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, errSinkStopped) {
			return err
		}
		if g.refused(rejects.ZMQDial, err) {
			lg.Warn("engine publisher sent what ZMTP or ingest's limits refuse; reconnecting", "endpoint", endpoint, "err", err)
		} else {
			lg.Info("engine publisher connection lost; reconnecting", "endpoint", endpoint, "err", err)
		}
		sleepCtx(ctx, retry)
	}
	return nil
}

// errSubscribe marks a subscription the socket refused: not a connection
// problem, so it is not retried.
var errSubscribe = errors.New("ingest: subscribe")

// dialSocket connects go-zeromq's SUB socket, for endpoints without a
// net.Conn (inproc://).
func dialSocket(ctx context.Context, endpoint, topic string, retry time.Duration, lg *slog.Logger) (msgReceiver, func() error, error) {
	sub := zmq4.NewSub(ctx, zmq4.WithLogger(ZMQLogger(lg)), zmq4.WithDialerRetry(retry), zmq4.WithDialerMaxRetries(-1))
	if err := sub.SetOption(zmq4.OptionSubscribe, topic); err != nil {
		sub.Close()
		return nil, nil, fmt.Errorf("%w %q on %s: %w", errSubscribe, topic, endpoint, err)
	}
	if err := sub.Dial(endpoint); err != nil {
		sub.Close()
		return nil, nil, err
	}
	return socketReceiver{sub}, sub.Close, nil
}

// subscribeBind binds a SUB at endpoint, which engines configured with a
// non-wildcard tcp endpoint connect to, and calls out for every message
// until ctx ends or out fails. Connections come and go; each is read by its
// own goroutine, at most g.limits.MaxConns at once (more are closed as they
// are accepted), and out is called by one of them at a time, so a
// publisher's messages reach out in its order.
func subscribeBind(ctx context.Context, endpoint, topic string, g *connGuard, out func(received) error, bad func(error), ready func(addr string)) error {
	network, laddr, ok := netEndpoint(endpoint)
	if !ok {
		return subscribeBindSocket(ctx, endpoint, topic, g.log, out, bad, ready)
	}
	lg := g.log
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, network, laddr)
	if err != nil {
		return fmt.Errorf("ingest: bind %s: %w", endpoint, err)
	}
	addr := endpoint
	if network == "tcp" {
		addr = "tcp://" + ln.Addr().String()
	}
	lg.Info("listening for engine publishers", "endpoint", addr, "topic", topic, "max_conns", g.limits.MaxConns)
	if ready != nil {
		ready(addr)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var (
		wg    sync.WaitGroup
		outMu sync.Mutex
		slots = make(chan struct{}, g.limits.MaxConns)
	)
	serialOut := func(r received) error {
		outMu.Lock()
		defer outMu.Unlock()
		return out(r)
	}
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			// Out of file descriptors, or a connection reset before it was
			// accepted: the listener is fine, so keep accepting.
			lg.Warn("accepting an engine publisher failed; retrying", "endpoint", addr, "err", err)
			sleepCtx(ctx, 50*time.Millisecond)
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			g.rejects.Inc(rejects.ZMQBind, reasonTooManyConns)
			lg.Debug("refused an engine publisher: too many connections", "endpoint", addr, "peer", nc.RemoteAddr(), "max_conns", g.limits.MaxConns)
			nc.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			err := g.run(rejects.ZMQBind, addr, func() error { return serveSub(ctx, nc, topic, g, serialOut, bad) })
			if errors.Is(err, errSinkStopped) {
				cancel(err)
				return
			}
			if ctx.Err() == nil && g.refused(rejects.ZMQBind, err) {
				lg.Debug("refused an engine publisher", "endpoint", addr, "peer", nc.RemoteAddr(), "err", err)
			} else if ctx.Err() == nil {
				lg.Debug("an engine publisher disconnected", "endpoint", addr, "peer", nc.RemoteAddr(), "err", err)
			}
		}()
	}
	ln.Close()
	cancel(nil)
	wg.Wait()
	if err := context.Cause(ctx); errors.Is(err, errSinkStopped) {
		return err
	}
	return nil
}

// serveSub reads one accepted connection until it ends. It owns nc.
func serveSub(ctx context.Context, nc net.Conn, topic string, g *connGuard, out func(received) error, bad func(error)) error {
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	sc, err := openSub(nc, topic, g.limits)
	if err != nil {
		return err
	}
	return recvLoop(ctx, sc, out, bad)
}

// subscribeBindSocket is subscribeBind through go-zeromq's socket, for
// endpoints without a net.Conn (inproc://).
func subscribeBindSocket(ctx context.Context, endpoint, topic string, lg *slog.Logger, out func(received) error, bad func(error), ready func(addr string)) error {
	sub := zmq4.NewSub(ctx, zmq4.WithLogger(ZMQLogger(lg)))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, topic); err != nil {
		return fmt.Errorf("ingest: subscribe %q on %s: %w", topic, endpoint, err)
	}
	if err := sub.Listen(endpoint); err != nil {
		return fmt.Errorf("ingest: bind %s: %w", endpoint, err)
	}
	lg.Info("listening for engine publishers", "endpoint", endpoint, "topic", topic)
	if ready != nil {
		ready(endpoint)
	}
	for ctx.Err() == nil {
		err := recvLoop(ctx, socketReceiver{sub}, out, bad)
		if ctx.Err() != nil || errors.Is(err, errSinkStopped) {
			return err
		}
		lg.Debug("an engine publisher disconnected", "endpoint", endpoint, "err", err)
	}
	return nil
}

var errSinkStopped = errors.New("ingest: pipeline stopped")

// recvLoop receives until a socket error (returned) or out fails.
func recvLoop(ctx context.Context, sock msgReceiver, out func(received) error, bad func(error)) error {
	for {
		frames, err := sock.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		m, err := ParseLive(frames)
		if err != nil {
			bad(err)
			continue
		}
		if err := out(received{msg: m, at: time.Now()}); err != nil {
			return fmt.Errorf("%w: %w", errSinkStopped, err)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
