package ingest

import (
	"fmt"
	"time"
)

// ZMTPLimits bound what one ZMQ peer can make ingest hold or wait for. The
// zero value of each field means its default.
type ZMTPLimits struct {
	// MaxFrameBytes bounds one frame (default DefaultZMQMaxFrameBytes).
	MaxFrameBytes int
	// MaxMessageBytes bounds the frames of one message together (default
	// MaxFrameBytes plus DefaultZMQMessageOverhead).
	MaxMessageBytes int
	// HandshakeTimeout bounds the greeting and READY exchange, so a peer
	// that connects and says nothing cannot hold a connection (default
	// DefaultZMQHandshakeTimeout). It also bounds a PONG write.
	HandshakeTimeout time.Duration
	// MaxConns bounds the connections open at once on the bound SUB
	// (default DefaultZMQMaxConns); more are closed as they are accepted.
	MaxConns int
}

// Defaults of ZMTPLimits.
const (
	// DefaultZMQMaxFrameBytes lets the largest batch the decoder accepts
	// through, and nothing larger: a bigger payload would be refused after
	// it was read anyway.
	DefaultZMQMaxFrameBytes = MaxPayloadBytes
	// DefaultZMQMessageOverhead is the room a message has next to its
	// largest frame, for the topic and seq frames.
	DefaultZMQMessageOverhead  = 64 << 10
	DefaultZMQHandshakeTimeout = 10 * time.Second
	DefaultZMQMaxConns         = 256
)

func (l *ZMTPLimits) defaults() {
	if l.MaxFrameBytes == 0 {
		l.MaxFrameBytes = DefaultZMQMaxFrameBytes
	}
	if l.MaxMessageBytes == 0 {
		l.MaxMessageBytes = l.MaxFrameBytes + DefaultZMQMessageOverhead
	}
	if l.HandshakeTimeout == 0 {
		l.HandshakeTimeout = DefaultZMQHandshakeTimeout
	}
	if l.MaxConns == 0 {
		l.MaxConns = DefaultZMQMaxConns
	}
}

// Validate refuses limits that contradict each other or are negative.
func (l ZMTPLimits) Validate() error {
	if l.MaxFrameBytes < 0 || l.MaxMessageBytes < 0 || l.HandshakeTimeout < 0 || l.MaxConns < 0 {
		return fmt.Errorf("ZMQ limits must not be negative: %+v", l)
	}
	if l.MaxMessageBytes > 0 && l.MaxMessageBytes < l.MaxFrameBytes {
		return fmt.Errorf("the ZMQ message limit (%d bytes) is below the frame limit (%d bytes)", l.MaxMessageBytes, l.MaxFrameBytes)
	}
	return nil
}

// withDefaults returns l with its zero fields set.
func (l ZMTPLimits) withDefaults() ZMTPLimits {
	l.defaults()
	return l
}
