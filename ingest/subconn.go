package ingest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
)

// A subConn is one ZMTP connection of ingest's SUB side with an engine's
// PUB, read through a buffer.
//
// Why not go-zeromq's socket: its connection reader does two unbuffered
// reads per frame (header, then body), so a [topic, seq, payload] message
// costs five read syscalls, and each message then crosses a goroutine and
// two channels before Recv returns it. That capped ingest near 90k engine
// messages/s on two cores. Here go-zeromq still does everything ZMTP
// (greeting, NULL handshake, framing, PING/PONG: zmq4.Open, Conn.RecvMsg),
// but over a net.Conn whose reads go through a buffer, so one read syscall
// brings in every message the peer has written since, and RecvMsg runs on
// the caller's goroutine. inproc:// endpoints, which have no net.Conn, keep
// go-zeromq's socket.
type subConn struct {
	nc net.Conn
	zc *zmq4.Conn
}

// subReadBuffer is the read buffer of a subConn: many engine messages (a
// one-block event is ~150 bytes on the wire) per read syscall.
const subReadBuffer = 64 << 10

// handshakeTimeout bounds the ZMTP greeting and handshake, so a peer that
// accepts TCP but never speaks ZMTP cannot hang a reader.
const handshakeTimeout = 10 * time.Second

// bufferedConn is a net.Conn whose reads go through a bufio.Reader; writes
// (greeting, subscription, PONG) go straight to the connection.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// netEndpoint maps a ZMQ endpoint to Go's network and address; ok is false
// for endpoints without a net.Conn (inproc://).
func netEndpoint(endpoint string) (network, addr string, ok bool) {
	switch {
	case strings.HasPrefix(endpoint, "tcp://"):
		return "tcp", strings.TrimPrefix(endpoint, "tcp://"), true
	case strings.HasPrefix(endpoint, "ipc://"):
		return "unix", strings.TrimPrefix(endpoint, "ipc://"), true
	}
	return "", "", false
}

// openSub runs the ZMTP handshake as a SUB on nc (server: nc was accepted
// on a bound endpoint) and subscribes to topic. It owns nc: on error nc is
// closed.
func openSub(nc net.Conn, topic string, server bool) (*subConn, error) {
	bc := &bufferedConn{Conn: nc, r: bufio.NewReaderSize(nc, subReadBuffer)}
	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	zc, err := zmq4.Open(bc, null.Security(), zmq4.Sub, zmq4.SocketIdentity(""), server, nil)
	if err != nil {
		nc.Close()
		return nil, err
	}
	// ZMTP 3.0 subscription: a message whose first byte is 1, then the
	// topic prefix (what go-zeromq's SUB socket and libzmq send to a 3.0
	// peer; libzmq PUBs accept it).
	if err := zc.SendMsg(zmq4.NewMsg(append([]byte{1}, topic...))); err != nil {
		nc.Close()
		return nil, fmt.Errorf("zmq4: subscribe: %w", err)
	}
	_ = nc.SetDeadline(time.Time{})
	return &subConn{nc: nc, zc: zc}, nil
}

// dialSub connects to an engine's PUB at endpoint and subscribes to topic.
func dialSub(ctx context.Context, endpoint, topic string) (*subConn, error) {
	network, addr, ok := netEndpoint(endpoint)
	if !ok {
		return nil, fmt.Errorf("ingest: %s: no stream transport", endpoint)
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	nc, err := d.DialContext(dctx, network, addr)
	if err != nil {
		return nil, err
	}
	return openSub(nc, topic, false)
}

// Recv returns the next message (ZMTP commands are answered by go-zeromq
// and skipped).
func (c *subConn) Recv() (zmq4.Msg, error) {
	for {
		msg, err := c.zc.RecvMsg()
		if err != nil {
			return msg, err
		}
		if msg.Type != zmq4.CmdMsg {
			return msg, nil
		}
	}
}

// Close closes the connection; a blocked Recv returns.
func (c *subConn) Close() error { return c.nc.Close() }
