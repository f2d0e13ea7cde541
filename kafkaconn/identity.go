package kafkaconn

import (
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ClientIDPrefix starts every client id pdrouter gives brokers.
const ClientIDPrefix = "pdrouter-"

// ClientOpts are the options every client of a process shares: a client id
// that names the process's role ("pdrouter-router", "pdrouter-ingest",
// "pdrouter-<command>" for tools), so a broker's request logs, quotas and
// ACLs can tell pdrouter's roles apart; and franz-go's own logs through the
// process's slog logger, at the level its handler enables, rather than
// nowhere (per-flush lines at debug: logger.go).
func ClientOpts(role string, log *slog.Logger) []kgo.Opt {
	return []kgo.Opt{
		kgo.ClientID(ClientIDPrefix + role),
		kgo.WithLogger(newLogger(log.With("component", "kafka", "role", role))),
	}
}
