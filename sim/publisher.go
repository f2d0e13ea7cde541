package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"

	"github.com/go-zeromq/zmq4"

	"github.com/pdrouter/pdrouter/ingest"
)

// DefaultBufferSteps is vLLM's KVEventsConfig.buffer_steps default: how many published
// batches the replay socket can serve.
const DefaultBufferSteps = 10000

// PublisherConfig configures one engine's event publisher.
type PublisherConfig struct {
	// Endpoint is where the PUB socket binds (tcp://127.0.0.1:0 picks a free port).
	Endpoint string
	// ReplayEndpoint is where the replay ROUTER binds; "" disables replay.
	ReplayEndpoint string
	// Topic is frame 0 of every message (vLLM's `topic`, default empty).
	Topic string
	// BufferSteps batches are kept for replay (0: DefaultBufferSteps).
	BufferSteps int
	Format      WireFormat
	DPRank      int
}

// Publisher is an engine's KV event publisher, as vLLM's ZmqEventPublisher behaves on
// the wire: every batch is a 3-frame message [topic, seq as 8 bytes big-endian,
// msgpack payload] on a PUB socket, seq counts from 0 and grows by one per batch, and
// the last BufferSteps batches are served again on request by a ROUTER socket.
//
// The replay protocol: a client sends [empty, start seq (8 bytes BE)]; the ROUTER
// answers every buffered batch with seq ≥ start as [empty, topic, seq, payload] (the
// reply shape of vLLM ≥ v0.26, which carries the topic) and ends with
// [empty, empty, ff×8, empty]. Malformed requests are ignored, as vLLM ignores them.
type Publisher struct {
	cfg       PublisherConfig
	pub       zmq4.Socket
	router    zmq4.Socket
	endpoint  string
	replayEP  string
	topic     []byte
	mu        sync.Mutex
	seq       uint64
	buf       []buffered // ring, oldest at start
	start     int
	published uint64
	cancel    context.CancelFunc
	done      chan struct{}
}

type buffered struct {
	seq     uint64
	payload []byte
}

// zmqLog silences go-zeromq's own logging; the simulator reports through slog.
var zmqLog = log.New(io.Discard, "", 0)

// StartPublisher binds the sockets. Close releases them.
func StartPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.BufferSteps <= 0 {
		cfg.BufferSteps = DefaultBufferSteps
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = "tcp://127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{cfg: cfg, topic: []byte(cfg.Topic), cancel: cancel, done: make(chan struct{})}
	p.pub = zmq4.NewPub(ctx, zmq4.WithLogger(zmqLog))
	if err := p.pub.Listen(cfg.Endpoint); err != nil {
		cancel()
		p.pub.Close()
		return nil, fmt.Errorf("sim: bind PUB %s: %w", cfg.Endpoint, err)
	}
	p.endpoint = boundAddr(p.pub, cfg.Endpoint)
	if cfg.ReplayEndpoint == "" {
		close(p.done)
		return p, nil
	}
	p.router = zmq4.NewRouter(ctx, zmq4.WithLogger(zmqLog))
	if err := p.router.Listen(cfg.ReplayEndpoint); err != nil {
		cancel()
		p.pub.Close()
		p.router.Close()
		return nil, fmt.Errorf("sim: bind replay ROUTER %s: %w", cfg.ReplayEndpoint, err)
	}
	p.replayEP = boundAddr(p.router, cfg.ReplayEndpoint)
	go p.serveReplay(ctx)
	return p, nil
}

// boundAddr is the dialable address of a listening socket (the real port when the
// endpoint asked for port 0).
func boundAddr(s zmq4.Socket, ep string) string {
	if a := s.Addr(); a != nil && a.Network() == "tcp" {
		return "tcp://" + a.String()
	}
	return ep
}

// Endpoint is the PUB address subscribers dial.
func (p *Publisher) Endpoint() string { return p.endpoint }

// ReplayEndpoint is the ROUTER address, "" without replay.
func (p *Publisher) ReplayEndpoint() string { return p.replayEP }

// Topic is the topic frame.
func (p *Publisher) Topic() string { return p.cfg.Topic }

// Published is the number of batches published so far (the next seq).
func (p *Publisher) Published() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// Publish encodes events as one batch stamped ts (Unix seconds), sends it and keeps it
// for replay. Like vLLM it publishes nothing for an empty step. It returns the batch's
// seq and whether one was sent.
func (p *Publisher) Publish(ts float64, events []KVEvent) (uint64, bool, error) {
	if len(events) == 0 {
		return 0, false, nil
	}
	payload := EncodeBatch(ts, events, p.cfg.DPRank, p.cfg.Format)
	p.mu.Lock()
	seq := p.seq
	p.seq++
	if len(p.buf) < p.cfg.BufferSteps {
		p.buf = append(p.buf, buffered{seq, payload})
	} else {
		p.buf[p.start] = buffered{seq, payload}
		p.start = (p.start + 1) % len(p.buf)
	}
	p.mu.Unlock()
	err := p.pub.SendMulti(zmq4.NewMsgFrom(p.topic, ingest.SeqFrame(seq), payload))
	return seq, true, err
}

// replayFrom copies the buffered batches with seq ≥ from, oldest first.
func (p *Publisher) replayFrom(from uint64) []buffered {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []buffered
	for i := range p.buf {
		b := p.buf[(p.start+i)%len(p.buf)]
		if b.seq >= from {
			out = append(out, b)
		}
	}
	return out
}

func (p *Publisher) serveReplay(ctx context.Context) {
	defer close(p.done)
	for {
		msg, err := p.router.Recv()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return
			}
			continue
		}
		// As seen by the ROUTER: [identity, empty delimiter, start seq].
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 {
			continue
		}
		from, err := ingest.ParseSeq(msg.Frames[2])
		if err != nil {
			continue
		}
		id := msg.Frames[0]
		for _, b := range p.replayFrom(from) {
			if p.router.SendMulti(zmq4.NewMsgFrom(id, nil, p.topic, ingest.SeqFrame(b.seq), b.payload)) != nil {
				break
			}
		}
		_ = p.router.SendMulti(zmq4.NewMsgFrom(id, nil, nil, ingest.SeqFrame(ingest.EndSeq), nil))
	}
}

// Close stops the replay server and closes both sockets.
func (p *Publisher) Close() error {
	p.cancel()
	err := p.pub.Close()
	if p.router != nil {
		if e := p.router.Close(); err == nil {
			err = e
		}
	}
	<-p.done
	return err
}
