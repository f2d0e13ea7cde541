package ingest

import (
	"context"
	"fmt"
	"net"
	"strings"
)

// A subConn is one connection of ingest's SUB side with an engine's PUB:
// the ZMTP handshake as a SUB, then a subscription, then messages
// (zmtp_conn.go). inproc:// endpoints, which have no net.Conn, keep
// go-zeromq's socket (zmq.go), reachable only from inside the process.
type subConn struct {
	*zmtpConn
}

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

// openSub runs the ZMTP handshake as a SUB on nc and subscribes to topic.
// It owns nc: on error nc is closed.
func openSub(nc net.Conn, topic string, lim ZMTPLimits) (*subConn, error) {
	zc, err := zmtpHandshake(nc, socketSub, lim)
	if err != nil {
		nc.Close()
		return nil, err
	}
	// ZMTP 3.0 subscription: a message whose first byte is 1, then the
	// topic prefix (libzmq PUBs accept it from a 3.0 peer).
	if err := zc.Send([][]byte{append([]byte{1}, topic...)}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("zmtp: subscribe: %w", err)
	}
	return &subConn{zc}, nil
}

// dialStream connects to a tcp:// or ipc:// endpoint within the handshake
// timeout.
func dialStream(ctx context.Context, endpoint string, lim ZMTPLimits) (net.Conn, error) {
	network, addr, ok := netEndpoint(endpoint)
	if !ok {
		return nil, fmt.Errorf("ingest: %s: no stream transport", endpoint)
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, lim.withDefaults().HandshakeTimeout)
	defer cancel()
	return d.DialContext(dctx, network, addr)
}

// dialSub connects to an engine's PUB at endpoint and subscribes to topic.
func dialSub(ctx context.Context, endpoint, topic string, lim ZMTPLimits) (*subConn, error) {
	nc, err := dialStream(ctx, endpoint, lim)
	if err != nil {
		return nil, err
	}
	return openSub(nc, topic, lim)
}
