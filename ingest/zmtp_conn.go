package ingest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"
)

// A zmtpConn is one ZMTP 3.0 connection of ingest (a SUB or a DEALER) over
// a stream, read through a buffer.
//
// Why not go-zeromq's connection: it trusted the peer (a truncated READY
// property or a frame declaring 2^62 bytes panicked the process), and its
// reader does two unbuffered reads per frame. Here one read syscall brings
// in every message the peer has written since the last, Recv runs on the
// caller's goroutine, and:
//
//   - the handshake must finish within HandshakeTimeout;
//   - a frame's declared size is checked against MaxFrameBytes, and the
//     message's running total against MaxMessageBytes, before anything is
//     allocated for it; a large frame is then read in growing chunks, so
//     memory follows the bytes that really arrived, not the declared size;
//   - commands (PING, ERROR, anything else) are bounded by maxCommandBytes
//     and answered or skipped between messages; a command inside a
//     multipart message is a framing error;
//   - every refusal is a *zmtpError, and the connection is unusable after
//     any error (the caller closes it).
//
// A zmtpConn is used by one goroutine; Close may be called from any.
type zmtpConn struct {
	nc  net.Conn
	r   *bufio.Reader
	lim ZMTPLimits
	// cmd is the scratch buffer of command bodies (bounded by
	// maxCommandBytes).
	cmd []byte
	// wbuf is the scratch buffer of writes.
	wbuf []byte
}

// errPeerError is the end of a connection whose peer sent ERROR: the peer's
// decision, not a refusal of ours.
var errPeerError = errors.New("zmtp: the peer closed the connection with ERROR")

// zmtpReadBuffer is the read buffer: many engine messages (a one-block
// event is ~150 bytes on the wire) per read syscall.
const zmtpReadBuffer = 64 << 10

// largeFrameChunk is the size from which a frame is read incrementally.
const largeFrameChunk = 64 << 10

// zmtpHandshake runs the greeting and the NULL handshake as socketType on
// nc, within lim.HandshakeTimeout. It does not own nc: on error the caller
// closes it.
func zmtpHandshake(nc net.Conn, socketType string, lim ZMTPLimits) (*zmtpConn, error) {
	lim.defaults()
	c := &zmtpConn{nc: nc, r: bufio.NewReaderSize(nc, zmtpReadBuffer), lim: lim}
	_ = nc.SetDeadline(time.Now().Add(lim.HandshakeTimeout))
	if err := c.handshake(socketType); err != nil {
		return nil, handshakeError(err)
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

func (c *zmtpConn) handshake(socketType string) error {
	if err := c.write(appendGreeting(c.wbuf[:0])); err != nil {
		return err
	}
	var g [greetingSize]byte
	if n, err := io.ReadFull(c.r, g[:]); err != nil {
		if n > 0 && errors.Is(err, io.ErrUnexpectedEOF) {
			return refuse(reasonBadGreeting, "greeting cut short after %d bytes", n)
		}
		return err
	}
	if err := parseGreeting(g[:]); err != nil {
		return err
	}
	err := c.ready(socketType)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return refuse(reasonBadHandshake, "connection closed during the NULL handshake")
	}
	return err
}

// ready exchanges READY commands and checks the peer's socket type.
func (c *zmtpConn) ready(socketType string) error {
	if err := c.write(appendReady(c.wbuf[:0], socketType)); err != nil {
		return err
	}
	flags, size, err := c.readHeader()
	if err != nil {
		return err
	}
	if flags&flagCommand == 0 {
		return refuse(reasonBadHandshake, "a message frame before READY")
	}
	body, err := c.readCommand(size)
	if err != nil {
		return err
	}
	name, data, err := parseCommand(body)
	if err != nil {
		return &zmtpError{Reason: reasonBadHandshake, Err: err}
	}
	switch name {
	case "READY":
		rp, err := parseReady(data)
		if err != nil {
			return err
		}
		return checkPeer(socketType, rp.socketType)
	case "ERROR":
		return refuse(reasonBadHandshake, "the peer refused the handshake: %s", parseError(data))
	}
	return refuse(reasonBadHandshake, "command %s before READY", printable([]byte(name)))
}

// handshakeError makes a deadline during the handshake a refusal of its
// own; other errors pass unchanged.
func handshakeError(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &zmtpError{Reason: reasonHandshakeTimeout, Err: err}
	}
	return err
}

// readHeader reads a frame's flags and declared size. The size stays a
// uint64 until it has been checked against a limit.
func (c *zmtpConn) readHeader() (flags byte, size uint64, err error) {
	if flags, err = c.r.ReadByte(); err != nil {
		return 0, 0, err
	}
	if flags&flagReserved != 0 {
		return 0, 0, refuse(reasonBadFrame, "frame flags 0x%02x set reserved bits", flags)
	}
	if flags&flagLong == 0 {
		b, err := c.r.ReadByte()
		if err != nil {
			return 0, 0, unexpected(err)
		}
		return flags, uint64(b), nil
	}
	var b [8]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		return 0, 0, unexpected(err)
	}
	return flags, binary.BigEndian.Uint64(b[:]), nil
}

// unexpected turns an EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readCommand reads a command body of size bytes into the scratch buffer;
// it is valid until the next readCommand.
func (c *zmtpConn) readCommand(size uint64) ([]byte, error) {
	if size > maxCommandBytes || size > uint64(c.lim.MaxFrameBytes) {
		return nil, refuse(reasonFrameTooLarge, "command frame of %d bytes, over %d", size, min(maxCommandBytes, c.lim.MaxFrameBytes))
	}
	if uint64(cap(c.cmd)) < size {
		c.cmd = make([]byte, size)
	}
	b := c.cmd[:size]
	if _, err := io.ReadFull(c.r, b); err != nil {
		return nil, unexpected(err)
	}
	return b, nil
}

// readBody reads a message frame of size bytes (already checked against the
// limits). Up to largeFrameChunk it is one allocation of the exact size;
// past it, the buffer grows as the bytes arrive, at most doubling, so a
// peer that declares a large frame and sends little costs little.
func (c *zmtpConn) readBody(size int) ([]byte, error) {
	if size <= largeFrameChunk {
		b := make([]byte, size)
		if _, err := io.ReadFull(c.r, b); err != nil {
			return nil, unexpected(err)
		}
		return b, nil
	}
	b := make([]byte, 0, largeFrameChunk)
	for len(b) < size {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(size-len(b), cap(b)))
		}
		end := min(size, cap(b))
		if _, err := io.ReadFull(c.r, b[len(b):end]); err != nil {
			return nil, unexpected(err)
		}
		b = b[:end]
	}
	return b, nil
}

// Recv returns the next message's frames. Commands between messages are
// handled here: PING is answered with PONG, ERROR ends the connection,
// others are skipped.
func (c *zmtpConn) Recv() ([][]byte, error) {
	var (
		frames [][]byte
		total  uint64
	)
	for {
		flags, size, err := c.readHeader()
		if err != nil {
			if len(frames) > 0 {
				err = unexpected(err)
			}
			return nil, err
		}
		if flags&flagCommand != 0 {
			if len(frames) > 0 {
				return nil, refuse(reasonBadFrame, "a command inside a %d-frame message", len(frames))
			}
			if flags&flagMore != 0 {
				return nil, refuse(reasonBadFrame, "a command frame with MORE set")
			}
			if err := c.command(size); err != nil {
				return nil, err
			}
			continue
		}
		if size > uint64(c.lim.MaxFrameBytes) {
			return nil, refuse(reasonFrameTooLarge, "frame of %d bytes, over %d", size, c.lim.MaxFrameBytes)
		}
		if total+size > uint64(c.lim.MaxMessageBytes) {
			return nil, refuse(reasonFrameTooLarge, "message of %d+ bytes, over %d", total+size, c.lim.MaxMessageBytes)
		}
		if len(frames) == maxMessageFrames {
			return nil, refuse(reasonBadFrame, "message of more than %d frames", maxMessageFrames)
		}
		total += size
		body, err := c.readBody(int(size))
		if err != nil {
			return nil, err
		}
		if frames == nil {
			frames = make([][]byte, 0, 4)
		}
		frames = append(frames, body)
		if flags&flagMore == 0 {
			return frames, nil
		}
	}
}

// command handles one command frame between messages.
func (c *zmtpConn) command(size uint64) error {
	body, err := c.readCommand(size)
	if err != nil {
		return err
	}
	name, data, err := parseCommand(body)
	if err != nil {
		return err
	}
	switch name {
	case "PING":
		ctx, err := pongFor(data)
		if err != nil {
			return err
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.lim.HandshakeTimeout))
		err = c.write(appendCommand(c.wbuf[:0], "PONG", ctx))
		_ = c.nc.SetWriteDeadline(time.Time{})
		return err
	case "ERROR":
		return fmt.Errorf("%w: %s", errPeerError, parseError(data))
	}
	return nil
}

// Send writes one multipart message.
func (c *zmtpConn) Send(frames [][]byte) error {
	return c.write(appendMessage(c.wbuf[:0], frames))
}

// write writes b, keeping it as the scratch buffer for the next write.
func (c *zmtpConn) write(b []byte) error {
	c.wbuf = b[:0]
	_, err := c.nc.Write(b)
	return err
}

// Close closes the connection; a blocked Recv returns.
func (c *zmtpConn) Close() error { return c.nc.Close() }
