package ingest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// This file is the ZMTP 3 codec of ingest's own sockets (zmtp_conn.go): the
// greeting, commands and READY metadata, pure functions over bytes. The
// peer is anyone who can reach a bound port or register an endpoint, so
// every function here holds these invariants:
//
//   - a length read from the wire is compared with the bytes that are
//     really there (or with a limit) before it is used, in uint64, so no
//     declared size can overflow an int, index past a slice or size an
//     allocation;
//   - nothing panics on any input (FuzzZMTPConn checks it through the connection that uses it);
//   - every refusal is a *zmtpError whose reason is one of the fixed
//     strings below, which is what pdrouter_rejected_total counts.
//
// Only what ingest needs is spoken: ZMTP 3.0 with the NULL mechanism, as a
// SUB that receives and a DEALER that sends one request and reads replies.

// Refusal reasons, counted in pdrouter_rejected_total{entry="zmq_bind" or
// "zmq_dial", reason}.
const (
	reasonBadGreeting      = "bad_greeting"
	reasonBadHandshake     = "bad_handshake"
	reasonHandshakeTimeout = "handshake_timeout"
	reasonFrameTooLarge    = "frame_too_large"
	reasonBadFrame         = "bad_frame"
	reasonTooManyConns     = "too_many_connections"
)

// zmtpReasons are every reason above, declared up front so their series
// exist at 0.
var zmtpReasons = []string{reasonBadGreeting, reasonBadHandshake, reasonHandshakeTimeout, reasonFrameTooLarge, reasonBadFrame, reasonTooManyConns}

// zmtpError is a refusal of what a peer sent.
type zmtpError struct {
	Reason string
	Err    error
}

func (e *zmtpError) Error() string { return "zmtp: " + e.Reason + ": " + e.Err.Error() }
func (e *zmtpError) Unwrap() error { return e.Err }

func refuse(reason, format string, args ...any) error {
	return &zmtpError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// zmtpReason is the refusal reason carried by err, or "" for an error that
// is no refusal (the peer went away, ingest is stopping).
func zmtpReason(err error) string {
	var ze *zmtpError
	if errors.As(err, &ze) {
		return ze.Reason
	}
	return ""
}

// Greeting layout (64 bytes): signature ff, 8 padding bytes, 7f; version
// major, minor; mechanism (20 bytes, NUL padded); as-server; 31 filler.
const (
	greetingSize     = 64
	mechanismOffset  = 12
	mechanismSize    = 20
	asServerOffset   = 32
	zmtpMajorVersion = 3
)

var nullMechanism = [mechanismSize]byte{'N', 'U', 'L', 'L'}

// appendGreeting appends ingest's greeting: ZMTP 3.0, NULL, not as-server
// (NULL has no client and server roles). Version 3.0 makes a 3.1 peer
// speak 3.0, whose subscriptions are messages, which is what subConn sends.
func appendGreeting(dst []byte) []byte {
	var g [greetingSize]byte
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = zmtpMajorVersion, 0
	copy(g[mechanismOffset:], nullMechanism[:])
	return append(dst, g[:]...)
}

// parseGreeting checks a peer's greeting: the signature, a major version of
// at least 3 (a newer peer downgrades to ours), the NULL mechanism. The
// padding, minor version, as-server flag and filler carry nothing ingest
// needs.
func parseGreeting(g []byte) error {
	if len(g) != greetingSize {
		return refuse(reasonBadGreeting, "greeting of %d bytes, want %d", len(g), greetingSize)
	}
	if g[0] != 0xff || g[9] != 0x7f {
		return refuse(reasonBadGreeting, "no ZMTP signature (starts %x)", g[:10])
	}
	if g[10] < zmtpMajorVersion {
		return refuse(reasonBadGreeting, "ZMTP version %d.%d, want 3 or later", g[10], g[11])
	}
	if !bytes.Equal(g[mechanismOffset:mechanismOffset+mechanismSize], nullMechanism[:]) {
		return refuse(reasonBadGreeting, "security mechanism %s, want NULL", printable(bytes.TrimRight(g[mechanismOffset:mechanismOffset+mechanismSize], "\x00")))
	}
	return nil
}

// Frame flags. The reserved bits must be zero.
const (
	flagMore     = 0x01
	flagLong     = 0x02
	flagCommand  = 0x04
	flagReserved = 0xf8
)

// appendFrameHeader appends the header of a frame of size bytes.
func appendFrameHeader(dst []byte, flags byte, size int) []byte {
	if size > 255 {
		return binary.BigEndian.AppendUint64(append(dst, flags|flagLong), uint64(size))
	}
	return append(dst, flags, byte(size))
}

// appendMessage appends a multipart message, MORE set on all frames but the
// last.
func appendMessage(dst []byte, frames [][]byte) []byte {
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = flagMore
		}
		dst = append(appendFrameHeader(dst, flags, len(f)), f...)
	}
	return dst
}

// appendCommand appends a command frame: the name's length, the name, data.
func appendCommand(dst []byte, name string, data []byte) []byte {
	dst = appendFrameHeader(dst, flagCommand, 1+len(name)+len(data))
	dst = append(append(dst, byte(len(name))), name...)
	return append(dst, data...)
}

// Socket types ingest is, or accepts as a peer.
const (
	socketSub    = "SUB"
	socketDealer = "DEALER"
)

// peersOf lists the peer socket types each of ingest's socket types may
// talk to (the ZMTP socket compatibility table).
var peersOf = map[string][]string{
	socketSub:    {"PUB", "XPUB"},
	socketDealer: {"ROUTER", "DEALER", "REP"},
}

// appendReady appends ingest's READY command for socketType. A DEALER
// sends an empty Identity as libzmq's does; a SUB has none.
func appendReady(dst []byte, socketType string) []byte {
	var props []byte
	props = appendProperty(props, "Socket-Type", socketType)
	if socketType == socketDealer {
		props = appendProperty(props, "Identity", "")
	}
	return appendCommand(dst, "READY", props)
}

func appendProperty(dst []byte, name, value string) []byte {
	dst = append(append(dst, byte(len(name))), name...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(value)))
	return append(dst, value...)
}

// Bounds of the handshake. They are shapes of the protocol, not tunables:
// a READY carries a handful of short properties (libzmq sends two, plus
// any the application sets), and no command ingest reads comes near 64 KiB.
const (
	maxCommandBytes  = 64 << 10
	maxReadyProps    = 64
	maxIdentityBytes = 255
	// maxMessageFrames bounds the frames of one message: engines send 3
	// (live) or up to 4 (replay), and each frame costs a slice header
	// whatever its size, so a stream of empty frames must end somewhere.
	maxMessageFrames = 16
)

// parseCommand splits a command frame's body into its name and data.
func parseCommand(body []byte) (name string, data []byte, err error) {
	if len(body) == 0 {
		return "", nil, refuse(reasonBadFrame, "empty command frame")
	}
	n := int(body[0])
	if n == 0 || n > len(body)-1 {
		return "", nil, refuse(reasonBadFrame, "command name of %d bytes in a %d-byte frame", n, len(body))
	}
	return string(body[1 : 1+n]), body[1+n:], nil
}

// readyProps is what ingest reads from a peer's READY.
type readyProps struct {
	socketType string
	identity   []byte
}

// parseReady reads READY metadata: properties of a 1-byte name length, the
// name, a 4-byte value length and the value, until the data ends. Names
// are case-insensitive. Every length is checked against what remains.
func parseReady(data []byte) (readyProps, error) {
	var rp readyProps
	seenType := false
	for n := 0; len(data) > 0; n++ {
		if n == maxReadyProps {
			return rp, refuse(reasonBadHandshake, "READY has more than %d properties", maxReadyProps)
		}
		nameLen := int(data[0])
		data = data[1:]
		if nameLen == 0 || nameLen > len(data) {
			return rp, refuse(reasonBadHandshake, "READY property name of %d bytes, %d left", nameLen, len(data))
		}
		name := data[:nameLen]
		data = data[nameLen:]
		if len(data) < 4 {
			return rp, refuse(reasonBadHandshake, "READY property %s: value length cut short", printable(name))
		}
		valueLen := uint64(binary.BigEndian.Uint32(data))
		data = data[4:]
		if valueLen > uint64(len(data)) {
			return rp, refuse(reasonBadHandshake, "READY property %s: value of %d bytes, %d left", printable(name), valueLen, len(data))
		}
		value := data[:valueLen]
		data = data[valueLen:]
		switch {
		case bytes.EqualFold(name, []byte("Socket-Type")):
			if seenType {
				return rp, refuse(reasonBadHandshake, "READY names its socket type twice")
			}
			seenType, rp.socketType = true, string(value)
		case bytes.EqualFold(name, []byte("Identity")):
			if len(value) > maxIdentityBytes {
				return rp, refuse(reasonBadHandshake, "identity of %d bytes, over %d", len(value), maxIdentityBytes)
			}
			rp.identity = value
		}
	}
	if !seenType {
		return rp, refuse(reasonBadHandshake, "READY without Socket-Type")
	}
	return rp, nil
}

// checkPeer refuses a peer socket type that self cannot talk to.
func checkPeer(self, peer string) error {
	for _, ok := range peersOf[self] {
		if peer == ok {
			return nil
		}
	}
	return refuse(reasonBadHandshake, "a %s cannot talk to a %s socket", self, printable([]byte(peer)))
}

// parseError reads an ERROR command's reason (a 1-byte length, then text),
// leniently: it only goes into an error message.
func parseError(data []byte) string {
	if len(data) == 0 {
		return ""
	}
	n := min(int(data[0]), len(data)-1)
	return printable(data[1 : 1+n])
}

// pongFor is the PONG that answers a PING's data: a 2-byte TTL, then up to
// 16 bytes of context that the PONG echoes.
func pongFor(ping []byte) ([]byte, error) {
	if len(ping) < 2 || len(ping) > 2+16 {
		return nil, refuse(reasonBadFrame, "PING of %d bytes, want 2 to 18", len(ping))
	}
	return ping[2:], nil
}

// printable quotes at most 64 bytes of peer data for logs and errors.
func printable(b []byte) string {
	if len(b) > 64 {
		return fmt.Sprintf("%q...", b[:64])
	}
	return fmt.Sprintf("%q", b)
}
