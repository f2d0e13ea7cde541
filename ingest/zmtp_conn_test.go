package ingest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// tcpPair is a real loopback TCP connection: ingest's end and the peer's.
func tcpPair(t *testing.T) (ours, theirs net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		nc, _ := ln.Accept()
		acc <- nc
	}()
	ours, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	theirs = <-acc
	t.Cleanup(func() { ours.Close(); theirs.Close() })
	return ours, theirs
}

// subOver runs the SUB handshake against a peer that writes peer (in the
// background: large writes must not wait for the handshake).
func subOver(t *testing.T, lim ZMTPLimits, peer []byte) (*zmtpConn, net.Conn) {
	t.Helper()
	ours, theirs := tcpPair(t)
	go func() { _, _ = theirs.Write(peer) }()
	zc, err := zmtpHandshake(ours, socketSub, lim)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return zc, theirs
}

func TestZMTPConnFramesAndLimits(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), (3<<20)/16+7) // 3 MiB + 112: read in growing chunks
	t.Run("short, long and large frames", func(t *testing.T) {
		msgs := cat(appendTestFrame(nil, 0x01, []byte("kv@w")), appendTestFrame(nil, 0x01, SeqFrame(7)), appendTestFrame(nil, 0x00, big),
			appendTestFrame(nil, 0x00, nil))
		zc, _ := subOver(t, ZMTPLimits{}, cat(goodPubHandshake, msgs))
		frames, err := zc.Recv()
		if err != nil || len(frames) != 3 || string(frames[0]) != "kv@w" || !bytes.Equal(frames[1], SeqFrame(7)) || !bytes.Equal(frames[2], big) {
			t.Fatalf("got %d frames, err %v", len(frames), err)
		}
		if frames, err := zc.Recv(); err != nil || len(frames) != 1 || len(frames[0]) != 0 {
			t.Fatalf("empty message: %q, %v", frames, err)
		}
	})
	t.Run("frame at and over the frame limit", func(t *testing.T) {
		lim := ZMTPLimits{MaxFrameBytes: 1000, MaxMessageBytes: 5000}
		zc, _ := subOver(t, lim, cat(goodPubHandshake, appendTestFrame(nil, 0, make([]byte, 1000)), appendTestFrame(nil, 0, make([]byte, 1001))))
		if _, err := zc.Recv(); err != nil {
			t.Fatalf("a frame at the limit: %v", err)
		}
		if _, err := zc.Recv(); zmtpReason(err) != reasonFrameTooLarge {
			t.Fatalf("a frame over the limit: %v", err)
		}
	})
	t.Run("message over the message limit", func(t *testing.T) {
		lim := ZMTPLimits{MaxFrameBytes: 1000, MaxMessageBytes: 1500}
		zc, _ := subOver(t, lim, cat(goodPubHandshake, appendTestFrame(nil, 1, make([]byte, 1000)), appendTestFrame(nil, 0, make([]byte, 501))))
		if _, err := zc.Recv(); zmtpReason(err) != reasonFrameTooLarge {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("too many frames", func(t *testing.T) {
		var b []byte
		for range maxMessageFrames + 1 {
			b = appendTestFrame(b, 1, nil)
		}
		zc, _ := subOver(t, ZMTPLimits{}, cat(goodPubHandshake, b))
		if _, err := zc.Recv(); zmtpReason(err) != reasonBadFrame {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a declared size is not an allocation", func(t *testing.T) {
		// A frame that declares the whole limit and sends 10 bytes: ingest
		// holds what arrived, not what was declared.
		lim := ZMTPLimits{MaxFrameBytes: 1 << 30, MaxMessageBytes: 1 << 30}
		zc, theirs := subOver(t, lim, cat(goodPubHandshake, testHeader(0, 1<<30), make([]byte, 10)))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		errc := make(chan error, 1)
		go func() { _, err := zc.Recv(); errc <- err }()
		time.Sleep(200 * time.Millisecond)
		runtime.ReadMemStats(&after)
		theirs.Close()
		if err := <-errc; err == nil {
			t.Fatal("a frame cut short was returned")
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Fatalf("allocated %d bytes for a frame of which 10 arrived", grew)
		}
	})
}

func TestZMTPConnPingPong(t *testing.T) {
	ping := testCommand("PING", append([]byte{0, 10}, "ctx-1"...))
	msg := appendTestFrame(nil, 0, []byte("after"))
	zc, theirs := subOver(t, ZMTPLimits{}, cat(goodPubHandshake, ping, msg))
	frames, err := zc.Recv()
	if err != nil || len(frames) != 1 || string(frames[0]) != "after" {
		t.Fatalf("got %q, %v", frames, err)
	}
	// What ingest wrote: greeting, READY, then the PONG.
	_ = theirs.SetReadDeadline(time.Now().Add(5 * time.Second))
	want := cat(testGreeting("NULL"), testCommand("READY", testProperty("Socket-Type", "SUB")), testCommand("PONG", []byte("ctx-1")))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(theirs, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ingest wrote %q (%v), want %q", got, err, want)
	}
}

func TestZMTPConnPeerError(t *testing.T) {
	zc, _ := subOver(t, ZMTPLimits{}, cat(goodPubHandshake, testCommand("ERROR", []byte("\x07go away"))))
	if _, err := zc.Recv(); !errors.Is(err, errPeerError) || zmtpReason(err) != "" {
		t.Fatalf("got %v, want the peer's ERROR, which is no refusal", err)
	}
}
