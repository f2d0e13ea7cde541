package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/ulid"
)

// DecisionIDTime reads the creation time out of a decision id: the API
// makes ULIDs, whose first 10 characters are the milliseconds since the
// epoch. It lets explain read a few minutes of the decisions topic instead
// of all of it.
func DecisionIDTime(id string) (time.Time, bool) {
	t, err := ulid.Time(id)
	return t, err == nil
}

var errFound = errors.New("found")

// FindDecision reads a decision record from the log by its id. When the id
// is a ULID, only the records decided within around of its time are read;
// otherwise (or with around ≤ 0) the log's window as given.
func FindDecision(ctx context.Context, log *KafkaLog, id string, around time.Duration) (*pb.DecisionRecord, error) {
	l := *log
	if t, ok := DecisionIDTime(id); ok && around > 0 {
		l.Window = Window{From: t.Add(-around), To: t.Add(around)}
	}
	var found *pb.DecisionRecord
	err := l.EachDecision(ctx, func(d *pb.DecisionRecord, _ Position) error {
		if d.GetDecisionId() == id {
			found = d
			return errFound
		}
		return nil
	})
	if found != nil {
		return found, nil
	}
	if err != nil {
		return nil, err
	}
	where := "the decisions topic"
	if !l.Window.From.IsZero() {
		where = fmt.Sprintf("the decisions decided between %s and %s", l.Window.From.UTC().Format(time.RFC3339), l.Window.To.UTC().Format(time.RFC3339))
	}
	return nil, fmt.Errorf("no decision %s in %s (retention may have deleted it; widen the search window to scan more)", id, where)
}

// ReadRecordFile reads one decision record from a JSON file: the body of
// GET /v1/decisions/{id}, or one line of `pdrouter log tail decisions
// --json` (whose "value" holds the record).
func ReadRecordFile(path string) (*pb.DecisionRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %w", path, err)
	}
	if v, ok := probe["value"]; ok {
		b = v
	}
	rec := &pb.DecisionRecord{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("%s: not a decision record: %w", path, err)
	}
	if rec.GetDecisionId() == "" {
		return nil, fmt.Errorf("%s: the record has no decision_id", path)
	}
	return rec, nil
}
