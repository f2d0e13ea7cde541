package api

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
)

// Position is where a record landed.
type Position struct {
	Topic     events.Topic
	Partition int32
	Offset    int64
}

// EventLog is the log the API appends to: decisions, lifecycle events and
// HTTP ingest.
type EventLog interface {
	// Append makes the records durable and returns where each landed, in
	// order. It returns only when every record is acknowledged by the
	// broker (acks=all, so by min.insync.replicas replicas), or with an
	// error, in which case none may be reported as written.
	Append(ctx context.Context, recs ...*kgo.Record) ([]Position, error)
}

// offsetsBody renders positions as the ingest answer (api.md): the offset
// each record was written at, the highest per topic and partition, ready to
// pass as `after` to /v1/route.
func offsetsBody(ps []Position) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for _, p := range ps {
		t := string(p.Topic)
		if out[t] == nil {
			out[t] = map[string]int64{}
		}
		k := fmt.Sprint(p.Partition)
		if cur, ok := out[t][k]; !ok || p.Offset > cur {
			out[t][k] = p.Offset
		}
	}
	return out
}

type kgoRecord = kgo.Record
