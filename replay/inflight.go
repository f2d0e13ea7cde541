package replay

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// InFlight is a decision of the deciding replica that it had counted
// itself, at once, when it made the explained decision, but that its state
// had not yet read back from the decisions topic at the watermark.
//
// conditional-disagg.md: "a replica counts its own decision at once and
// ignores it when the decision comes back from the log". So such a decision
// is in the replica's view (active decode blocks, prefill tokens, shared
// blocks) but not in the state at the watermark: the one expected, benign
// difference between a record and the rebuilt state.
type InFlight struct {
	DecisionID    string    `json:"decision_id"`
	RequestID     string    `json:"request_id"`
	Mode          string    `json:"mode"`
	DecodeWorker  string    `json:"decode_worker"`
	PrefillWorker string    `json:"prefill_worker,omitempty"`
	DecidedAt     time.Time `json:"decided_at"`
	Partition     int32     `json:"partition"`
	Offset        int64     `json:"offset"`

	rec *pb.DecisionRecord
}

// inFlightSlack bounds the scan for in-flight decisions past the explained
// decision's time. A decision counted in its view was appended (and so
// timestamped by the producer) before the view was read, which was before
// decided_at; the slack only absorbs clock granularity and producers that
// write records out of timestamp order.
const inFlightSlack = 2 * time.Second

// maxInFlightScan bounds the records the scan reads per explained decision.
const maxInFlightScan = 200_000

// findInFlight reads the decisions topic from the watermark onwards and
// returns the decisions that the record's replica made before the record
// and had not read back at the watermark: candidates for its local,
// at-once accounting. Only the deciding replica's own decisions qualify;
// another replica's decisions were invisible to it until applied.
func findInFlight(ctx context.Context, conn []kgo.Opt, names events.Names, rec *pb.DecisionRecord, bounds partitionBounds) ([]InFlight, error) {
	want := targetOf(rec.GetWatermark())
	at := rec.GetDecidedAtUnixNano()
	limitMs := time.Unix(0, at).Add(inFlightSlack).UnixMilli()
	var spans []span
	for _, p := range bounds.sortedPartitions(events.TopicDecisions) {
		b := bounds[events.TopicDecisions][p]
		from := max(want.get(events.TopicDecisions, p), b[0])
		if from < b[1] {
			spans = append(spans, span{Topic: events.TopicDecisions, Partition: p, From: from, To: b[1]})
		}
	}
	var out []InFlight
	scanned := 0
	stop := func(r *kgo.Record) bool { return r.Timestamp.UnixMilli() > limitMs || scanned >= maxInFlightScan }
	err := scanSpans(ctx, conn, names, spans, stop, func(recs []*kgo.Record) error {
		for _, r := range recs {
			scanned++
			env, err := events.Decode(names, r)
			if err != nil {
				continue
			}
			d, ok := env.Message.(*pb.DecisionRecord)
			if !ok || d.GetReplicaId() != rec.GetReplicaId() || d.GetDecisionId() == rec.GetDecisionId() ||
				d.GetDecidedAtUnixNano() > at {
				continue
			}
			out = append(out, InFlight{
				DecisionID: d.GetDecisionId(), RequestID: d.GetRequestId(), Mode: d.GetMode(),
				DecodeWorker: workerID(d.GetDecodeWorker()), PrefillWorker: workerID(d.GetPrefillWorker()),
				DecidedAt: time.Unix(0, d.GetDecidedAtUnixNano()).UTC(), Partition: r.Partition, Offset: r.Offset, rec: d,
			})
		}
		return nil
	})
	slices.SortFunc(out, func(a, b InFlight) int {
		if c := a.DecidedAt.Compare(b.DecidedAt); c != 0 {
			return c
		}
		if a.DecisionID < b.DecisionID {
			return -1
		}
		if a.DecisionID > b.DecisionID {
			return 1
		}
		return 0
	})
	return out, err
}
