package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zeromq/zmq4"
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

// ZMQReplayer speaks the engines' replay protocol with a DEALER socket: a
// REQ socket would accept only the first reply of the stream. Each replay
// uses a fresh socket, so a stream cut short (timeout, early stop) cannot
// leave stale replies for the next one. Replays are rare (gaps, restarts,
// start-up), so the extra connection costs nothing that matters.
type ZMQReplayer struct{}

func (ZMQReplayer) Replay(ctx context.Context, endpoint string, from uint64, timeout time.Duration, fn func(Message) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithLogger(zmqLogger), zmq4.WithDialerRetry(100*time.Millisecond),
		zmq4.WithDialerMaxRetries(int(timeout/(100*time.Millisecond))), zmq4.WithTimeout(timeout))
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
