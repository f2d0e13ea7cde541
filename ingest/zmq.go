package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Sockets are go-zeromq's pure-Go ZMTP 3 implementation, so ingest builds
// without cgo; TestZMQInteropPyzmq checks it against libzmq through pyzmq.

// zmqLogger silences go-zeromq's own logger (it prints to stderr on every
// refused connection); ingest logs what matters through slog.
var zmqLogger = log.New(io.Discard, "", 0)

// received is one message off a socket, with its arrival time.
type received struct {
	msg Message
	at  time.Time
}

// subscribeConnect dials an engine's PUB at endpoint and calls out for every
// well-framed message until ctx ends. A lost connection (engine restart) is
// redialed after retry; a missed stretch shows up as a sequence gap or
// restart downstream. Badly framed messages go to bad.
func subscribeConnect(ctx context.Context, endpoint, topic string, retry time.Duration, lg *slog.Logger,
	out func(received) error, bad func(error), connected func() error) error {
	for ctx.Err() == nil {
		sub := zmq4.NewSub(ctx, zmq4.WithLogger(zmqLogger), zmq4.WithDialerRetry(retry), zmq4.WithDialerMaxRetries(-1))
		if err := sub.SetOption(zmq4.OptionSubscribe, topic); err != nil {
			sub.Close()
			return fmt.Errorf("ingest: subscribe %q on %s: %w", topic, endpoint, err)
		}
		if err := sub.Dial(endpoint); err != nil {
			sub.Close()
			if ctx.Err() != nil {
				break
			}
			lg.Warn("cannot connect to engine publisher; retrying", "endpoint", endpoint, "err", err)
			sleepCtx(ctx, retry)
			continue
		}
		lg.Debug("connected to engine publisher", "endpoint", endpoint, "topic", topic)
		if err := connected(); err != nil {
			sub.Close()
			return nil
		}
		err := recvLoop(ctx, sub, out, bad)
		sub.Close()
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, errSinkStopped) {
			return err
		}
		lg.Info("engine publisher connection lost; reconnecting", "endpoint", endpoint, "err", err)
		sleepCtx(ctx, retry)
	}
	return nil
}

// subscribeBind binds a SUB at endpoint, which engines configured with a
// non-wildcard tcp endpoint connect to, and calls out for every message
// until ctx ends. Connections come and go (each drop surfaces as a receive
// error from go-zeromq); the socket stays.
func subscribeBind(ctx context.Context, endpoint, topic string, lg *slog.Logger, out func(received) error, bad func(error), ready func(addr string)) error {
	sub := zmq4.NewSub(ctx, zmq4.WithLogger(zmqLogger))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, topic); err != nil {
		return fmt.Errorf("ingest: subscribe %q on %s: %w", topic, endpoint, err)
	}
	if err := sub.Listen(endpoint); err != nil {
		return fmt.Errorf("ingest: bind %s: %w", endpoint, err)
	}
	addr := endpoint
	if a := sub.Addr(); a != nil {
		addr = "tcp://" + a.String()
	}
	lg.Info("listening for engine publishers", "endpoint", addr, "topic", topic)
	if ready != nil {
		ready(addr)
	}
	for ctx.Err() == nil {
		err := recvLoop(ctx, sub, out, bad)
		if ctx.Err() != nil || errors.Is(err, errSinkStopped) {
			return err
		}
		lg.Debug("an engine publisher disconnected", "endpoint", addr, "err", err)
	}
	return nil
}

var errSinkStopped = errors.New("ingest: pipeline stopped")

// recvLoop receives until a socket error (returned) or out fails.
func recvLoop(ctx context.Context, sock zmq4.Socket, out func(received) error, bad func(error)) error {
	for {
		msg, err := sock.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		m, err := ParseLive(msg.Frames)
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
