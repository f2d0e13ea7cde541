// Package logflags builds the slog logger of a pdrouter binary from its
// --log-level and --log-format flags, so that every binary of the
// repository (pdrouter, pdrouter-discovery) logs alike.
package logflags

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// New returns a logger writing to w at level (debug, info, warn or error)
// in format (text or json).
func New(w io.Writer, level, format string) (*slog.Logger, error) {
	lv, err := parseLevel("--log-level", level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// AtLeast returns a logger on log's own handler (one writer, one lock) that
// passes on only records at level or above, and never below log's own level:
// for a component whose lines an operator wants only when asked (the Kafka
// client's, --kafka-log-level). flag names the flag in the error.
func AtLeast(log *slog.Logger, flag, level string) (*slog.Logger, error) {
	lv, err := parseLevel(flag, level)
	if err != nil {
		return nil, err
	}
	return slog.New(minLevel{h: log.Handler(), min: lv}), nil
}

func parseLevel(flag, level string) (slog.Level, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return 0, fmt.Errorf("%s %q: want debug, info, warn or error", flag, level)
	}
	return lv, nil
}

// minLevel passes on only the records at min or above to h.
type minLevel struct {
	h   slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.h.Enabled(ctx, l)
}

func (m minLevel) Handle(ctx context.Context, r slog.Record) error { return m.h.Handle(ctx, r) }

func (m minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h: m.h.WithAttrs(as), min: m.min}
}

func (m minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h: m.h.WithGroup(name), min: m.min}
}
