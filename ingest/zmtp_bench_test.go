package ingest

import (
	"context"
	"encoding/binary"
	"net"
	"testing"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
)

// BenchmarkSubConnRecv is the SUB side's socket path alone: a go-zeromq PUB
// on a real loopback TCP connection writes [topic, seq, payload] messages
// of a one-block batch as fast as it can, and ingest's connection reads
// them. It measures the framing and buffering cost per message, which is
// what the buffered reader exists for (one read syscall, many messages).
func BenchmarkSubConnRecv(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	payload := oneBlockBatch(b, 1, 1)
	const perChunk = 256
	var chunk []byte
	for i := range perChunk {
		chunk = appendTestFrame(chunk, 0x01, []byte("kv@w"))
		chunk = appendTestFrame(chunk, 0x01, SeqFrame(uint64(i)))
		chunk = appendTestFrame(chunk, 0x00, payload)
	}
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		if _, err := zmq4.Open(nc, null.Security(), zmq4.Pub, zmq4.SocketIdentity(""), true, nil); err != nil {
			return
		}
		for {
			if _, err := nc.Write(chunk); err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sc, err := dialSub(ctx, "tcp://"+ln.Addr().String(), "", ZMTPLimits{})
	if err != nil {
		b.Fatal(err)
	}
	defer sc.Close()
	b.SetBytes(int64(len(chunk) / perChunk))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sc.Recv(); err != nil {
			b.Fatal(err)
		}
	}
}

// appendTestFrame appends one ZMTP 3 frame with the given flags (MORE is
// 0x01), choosing the short or long size form as the spec does.
func appendTestFrame(dst []byte, flags byte, body []byte) []byte {
	if len(body) > 255 {
		dst = append(dst, flags|0x02)
		dst = binary.BigEndian.AppendUint64(dst, uint64(len(body)))
	} else {
		dst = append(dst, flags, byte(len(body)))
	}
	return append(dst, body...)
}
