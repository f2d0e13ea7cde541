package ingest

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestZMQLoggerReachesSlog: what go-zeromq prints goes to ingest's slog
// logger at Debug, marked component=zmq, and nowhere at Info.
func TestZMQLoggerReachesSlog(t *testing.T) {
	for _, c := range []struct {
		level slog.Level
		want  bool
	}{{slog.LevelDebug, true}, {slog.LevelInfo, false}} {
		var buf bytes.Buffer
		ZMQLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: c.level}))).Printf("zmq4: could not dial %s", "inproc://x")
		got := buf.String()
		if has := strings.Contains(got, "component=zmq") && strings.Contains(got, "could not dial inproc://x") && strings.Contains(got, "level=DEBUG"); has != c.want {
			t.Errorf("handler at %v: %q", c.level, got)
		}
	}
}
