package kafkaconn

import (
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

// perCallInfo are the messages franz-go logs at info once per call of an
// API that pdrouter calls once per record or per group of records
// (Client.Flush). At info they would be a line per decision.
var perCallInfo = map[string]bool{"flushing": true, "flushed": true}

// logger is franz-go's logger on slog, with the per-call info lines
// demoted to debug.
type logger struct{ kgo.Logger }

func newLogger(log *slog.Logger) kgo.Logger { return logger{kslog.New(log)} }

func (l logger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if level == kgo.LogLevelInfo && perCallInfo[msg] {
		level = kgo.LogLevelDebug
	}
	l.Logger.Log(level, msg, keyvals...)
}
