package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/pdrouter/pdrouter/internal/rejects"
)

// Replayer fetches buffered batches from an engine's replay socket.
type Replayer interface {
	// Replay asks endpoint for every buffered batch with seq >= from and
	// calls fn for each, in order, until the end marker, until fn returns
	// false, or until timeout. It returns nil when the stream ended at the
	// end marker or fn stopped it; an error otherwise (dial, timeout,
	// framing), after the replies that did arrive were passed to fn.
	Replay(ctx context.Context, endpoint string, from uint64, timeout time.Duration, fn func(Message) bool) error
}

// ErrReplayTimeout is returned when the replay stream did not end in time.
var ErrReplayTimeout = errors.New("ingest: replay did not finish in time")

// ZMQReplayer speaks the engines' replay protocol as a DEALER: a REQ socket
// would accept only the first reply of the stream. Each replay uses a fresh
// connection, so a stream cut short (timeout, early stop) cannot leave
// stale replies for the next one. Replays are rare (gaps, restarts,
// start-up), so the extra connection costs nothing that matters.
//
// Over tcp:// and ipc:// it is ingest's own ZMTP connection (zmtp_conn.go)
// with the limits and refusal counts of the engine's registration (entry
// zmq_dial): the endpoint comes from the log, so its bytes are as
// untrusted as a live publisher's. inproc:// uses go-zeromq's DEALER.
type ZMQReplayer struct {
	// guard is nil in a ZMQReplayer{} built outside New: default limits,
	// refusals counted nowhere.
	guard *connGuard
}

// replayRetry is the pause between dial attempts within one replay.
const replayRetry = 100 * time.Millisecond

func (z ZMQReplayer) Replay(ctx context.Context, endpoint string, from uint64, timeout time.Duration, fn func(Message) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, _, ok := netEndpoint(endpoint); !ok {
		var lg *slog.Logger
		if z.guard != nil {
			lg = z.guard.log
		}
		return replaySocket(ctx, endpoint, from, timeout, lg, fn)
	}
	g := z.guard
	if g == nil {
		g = defaultGuard()
	}
	err := g.run(rejects.ZMQDial, endpoint, func() error { return replayConn(ctx, g.limits, endpoint, from, fn) })
	if g.refused(rejects.ZMQDial, err) {
		return fmt.Errorf("ingest: replay from %s: %w", endpoint, err)
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (%s, from seq %d, after %v): %w", ErrReplayTimeout, endpoint, from, timeout, err)
	}
	return err
}

// replayConn is one replay over a ZMTP connection: dial (retried until ctx
// ends, as an engine may be restarting), handshake as a DEALER, send the
// request, read replies until the end marker.
func replayConn(ctx context.Context, lim ZMTPLimits, endpoint string, from uint64, fn func(Message) bool) error {
	zc, err := dialDealer(ctx, lim, endpoint)
	if err != nil {
		return err
	}
	defer zc.Close()
	stop := context.AfterFunc(ctx, func() { zc.Close() })
	defer stop()
	if err := zc.Send(ReplayRequest(from)); err != nil {
		return fmt.Errorf("ingest: replay: send request to %s: %w", endpoint, err)
	}
	for {
		frames, err := zc.Recv()
		if err != nil {
			return fmt.Errorf("ingest: replay: receive from %s: %w", endpoint, err)
		}
		m, end, err := ParseReplay(frames)
		if err != nil {
			return fmt.Errorf("ingest: replay from %s: %w", endpoint, err)
		}
		if end || !fn(m) {
			return nil
		}
	}
}

// dialDealer connects to endpoint and runs the handshake as a DEALER,
// redialing every replayRetry while the connection is refused, until ctx
// ends. A handshake the peer fails is not retried.
func dialDealer(ctx context.Context, lim ZMTPLimits, endpoint string) (*zmtpConn, error) {
	for {
		nc, err := dialStream(ctx, endpoint, lim)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("ingest: replay: connect %s: %w", endpoint, err)
			}
			sleepCtx(ctx, replayRetry)
			continue
		}
		if d, ok := ctx.Deadline(); ok {
			lim.HandshakeTimeout = min(lim.withDefaults().HandshakeTimeout, max(time.Until(d), time.Millisecond))
		}
		zc, err := zmtpHandshake(nc, socketDealer, lim)
		if err != nil {
			nc.Close()
			return nil, err
		}
		return zc, nil
	}
}

// replaySocket is a replay through go-zeromq's DEALER, for inproc://.
func replaySocket(ctx context.Context, endpoint string, from uint64, timeout time.Duration, lg *slog.Logger, fn func(Message) bool) error {
	d := zmq4.NewDealer(ctx, zmq4.WithLogger(ZMQLogger(lg)), zmq4.WithDialerRetry(replayRetry),
		zmq4.WithDialerMaxRetries(int(timeout/replayRetry)), zmq4.WithTimeout(timeout))
	defer d.Close()
	if err := d.Dial(endpoint); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: connect %s: %w", ErrReplayTimeout, endpoint, err)
		}
		return fmt.Errorf("ingest: replay: connect %s: %w", endpoint, err)
	}
	if err := d.SendMulti(zmq4.NewMsgFrom(ReplayRequest(from)...)); err != nil {
		return fmt.Errorf("ingest: replay: send request to %s: %w", endpoint, err)
	}
	for {
		msg, err := d.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w (%s, from seq %d, after %v)", ErrReplayTimeout, endpoint, from, timeout)
			}
			return fmt.Errorf("ingest: replay: receive from %s: %w", endpoint, err)
		}
		m, end, err := ParseReplay(msg.Frames)
		if err != nil {
			return fmt.Errorf("ingest: replay from %s: %w", endpoint, err)
		}
		if end || !fn(m) {
			return nil
		}
	}
}
