package main

import (
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/ingest"
)

// TestZMQLimitFlags: the ZMTP limits have safe defaults, are set by flag or
// PDR_ variable, reach ingest.Config, and nonsense is refused.
func TestZMQLimitFlags(t *testing.T) {
	parse := func(env map[string]string, args ...string) (ingest.Config, error) {
		return parseIngestFlags(env, append([]string{"--bind", "tcp://127.0.0.1:0"}, args...)...)
	}
	cfg, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := ingest.ZMTPLimits{MaxFrameBytes: ingest.MaxPayloadBytes, MaxMessageBytes: ingest.MaxPayloadBytes + 64<<10, HandshakeTimeout: 10 * time.Second, MaxConns: 256}
	if cfg.ZMTP != want {
		t.Fatalf("defaults %+v, want %+v", cfg.ZMTP, want)
	}
	cfg, err = parse(map[string]string{"PDR_ZMQ_MAX_CONNS": "7", "PDR_ZMQ_HANDSHAKE_TIMEOUT": "2s"}, "--zmq-max-frame-bytes", "1000", "--zmq-max-message-bytes", "2000")
	if err != nil {
		t.Fatal(err)
	}
	if want := (ingest.ZMTPLimits{MaxFrameBytes: 1000, MaxMessageBytes: 2000, HandshakeTimeout: 2 * time.Second, MaxConns: 7}); cfg.ZMTP != want {
		t.Fatalf("got %+v, want %+v", cfg.ZMTP, want)
	}
	for _, bad := range [][]string{{"--zmq-max-conns", "0"}, {"--zmq-max-frame-bytes", "-1"}, {"--zmq-handshake-timeout", "0s"},
		{"--zmq-max-frame-bytes", "3000", "--zmq-max-message-bytes", "2000"}} {
		if _, err := parse(nil, bad...); err == nil || !strings.Contains(err.Error(), "zmq") && !strings.Contains(err.Error(), "ZMQ") {
			t.Errorf("%v: got %v, want an error naming the limit", bad, err)
		}
	}
}
