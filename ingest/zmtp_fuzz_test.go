package ingest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// peerBytes is a net.Conn whose peer has written b and then closed: reads
// drain b, writes are accepted and dropped, deadlines never fire.
type peerBytes struct{ r *bytes.Reader }

func (c peerBytes) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c peerBytes) Write(p []byte) (int, error)      { return len(p), nil }
func (c peerBytes) Close() error                     { return nil }
func (c peerBytes) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c peerBytes) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c peerBytes) SetDeadline(time.Time) error      { return nil }
func (c peerBytes) SetReadDeadline(time.Time) error  { return nil }
func (c peerBytes) SetWriteDeadline(time.Time) error { return nil }

// FuzzZMTPConn feeds arbitrary peer bytes through the production handshake
// and framing (zmtpHandshake, then Recv until the bytes end), as a SUB and
// as a DEALER. Contract: no panic; every error is a refusal with a declared
// reason or the end of the bytes; no message breaks the limits.
func FuzzZMTPConn(f *testing.F) {
	for _, hc := range hostileCases() {
		f.Add(hc.bytes)
	}
	router := cat(testGreeting("NULL"), testCommand("READY", cat(testProperty("Socket-Type", "ROUTER"), testProperty("Identity", ""))))
	msg := cat(appendTestFrame(nil, 0x01, []byte("kv@w")), appendTestFrame(nil, 0x01, SeqFrame(3)), appendTestFrame(nil, 0x00, []byte{0x92, 0x01, 0x90}))
	f.Add(cat(goodPubHandshake, msg, testCommand("PING", []byte{0, 1, 'x'}), msg))
	f.Add(cat(router, appendTestFrame(nil, 0x01, nil), appendTestFrame(nil, 0x01, SeqFrame(EndSeq)), appendTestFrame(nil, 0x00, nil)))
	f.Add(cat(goodPubHandshake, appendTestFrame(nil, 0x00, make([]byte, 5000))))
	lim := ZMTPLimits{MaxFrameBytes: 4096, MaxMessageBytes: 6000, HandshakeTimeout: time.Second}
	known := append(slices.Clone(zmtpReasons), "")
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, st := range []string{socketSub, socketDealer} {
			zc, err := zmtpHandshake(peerBytes{bytes.NewReader(b)}, st, lim)
			for err == nil {
				var frames [][]byte
				frames, err = zc.Recv()
				total := 0
				for _, fr := range frames {
					total += len(fr)
					if len(fr) > lim.MaxFrameBytes {
						t.Fatalf("frame of %d bytes passed", len(fr))
					}
				}
				if total > lim.MaxMessageBytes || len(frames) > maxMessageFrames {
					t.Fatalf("message of %d bytes in %d frames passed", total, len(frames))
				}
			}
			reason := zmtpReason(err)
			if !slices.Contains(known, reason) {
				t.Fatalf("undeclared reason %q", reason)
			}
			if reason == "" && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, errPeerError) {
				t.Fatalf("%s: unexpected error %v", st, err)
			}
		}
	})
}
