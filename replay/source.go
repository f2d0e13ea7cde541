package replay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Window selects records by their event time (a decision's decided_at, an
// outcome's event time), From inclusive, To exclusive. A zero end is open.
type Window struct {
	From, To time.Time
}

// Contains reports whether an event time (Unix ns) is in the window.
func (w Window) Contains(ns int64) bool {
	if !w.From.IsZero() && ns < w.From.UnixNano() {
		return false
	}
	return w.To.IsZero() || ns < w.To.UnixNano()
}

// ParseTime reads a window end: RFC 3339, Unix milliseconds, "now", or a
// negative duration relative to now ("-2h"). Relative forms read the wall
// clock, once, to pick a window; nothing decided depends on it.
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return time.Time{}, nil
	case s == "now":
		return now, nil
	case strings.HasPrefix(s, "-"):
		if d, err := time.ParseDuration(s[1:]); err == nil {
			return now.Add(-d), nil
		}
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want RFC 3339 (2026-11-29T10:00:00Z), Unix milliseconds, now, or -DURATION (-2h)", s)
	}
	return t, nil
}

// Position is where a record came from: a Kafka partition and offset, or
// for a file the row number (Partition -1).
type Position struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// DecisionSource yields decision records: from the Kafka log (KafkaLog) or
// from an export file (OpenExport), so that what-if and tune run the same
// way on a live cluster and on a file someone sent.
type DecisionSource interface {
	EachDecision(ctx context.Context, fn func(*pb.DecisionRecord, Position) error) error
}

// KafkaLog reads a window of the event log.
type KafkaLog struct {
	Client []kgo.Opt
	Names  events.Names
	Window Window
	// Logger receives progress and skipped records; nil for none.
	Logger *slog.Logger
	// ProgressEvery is the progress interval; default 5 s.
	ProgressEvery time.Duration
	// Slack widens the offsets read around the window, since Kafka
	// timestamps (producer time) and event times differ by the append
	// latency; records are then filtered by event time. Default 1 min.
	Slack time.Duration
}

// EachDecision implements DecisionSource: every decision whose decided_at
// is in the window, partition by partition interleaved as fetched.
func (k *KafkaLog) EachDecision(ctx context.Context, fn func(*pb.DecisionRecord, Position) error) error {
	return k.each(ctx, events.TopicDecisions, "decisions", func(env *events.Envelope) error {
		d, ok := env.Message.(*pb.DecisionRecord)
		if !ok || !k.Window.Contains(d.GetDecidedAtUnixNano()) {
			return nil
		}
		return fn(d, Position{Partition: env.Partition, Offset: env.Offset})
	})
}

// EachOutcome yields every outcome whose event time is in the window.
func (k *KafkaLog) EachOutcome(ctx context.Context, fn func(*pb.OutcomeEvent, Position) error) error {
	return k.each(ctx, events.TopicOutcomes, "outcomes", func(env *events.Envelope) error {
		o, ok := env.Message.(*pb.OutcomeEvent)
		if !ok || !k.Window.Contains(o.GetEventTimeUnixNano()) {
			return nil
		}
		return fn(o, Position{Partition: env.Partition, Offset: env.Offset})
	})
}

func (k *KafkaLog) each(ctx context.Context, t events.Topic, what string, fn func(*events.Envelope) error) error {
	spans, err := k.spans(ctx, t)
	if err != nil {
		return err
	}
	var total int64
	for _, s := range spans {
		total += s.To - s.From
	}
	prog := NewProgress(k.Logger, "read "+what, total, k.ProgressEvery)
	defer prog.Done()
	invalid := 0
	return scanSpans(ctx, k.Client, k.Names, spans, nil, func(recs []*kgo.Record) error {
		for _, r := range recs {
			env, err := events.Decode(k.Names, r)
			if err != nil {
				invalid++
				if invalid <= 10 && k.Logger != nil {
					k.Logger.Warn("replay: skipping a record that does not decode", "err", err)
				}
				continue
			}
			if err := fn(env); err != nil {
				return err
			}
		}
		prog.Add(len(recs))
		return nil
	})
}

// spans resolves the window to offsets per partition: from the first
// record at or after From − Slack to the first at or after To + Slack (or
// the end offsets when the window is open), resolved once, so the read ends.
func (k *KafkaLog) spans(ctx context.Context, t events.Topic) ([]span, error) {
	cl, err := kgo.NewClient(k.Client...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	bounds, err := listBounds(ctx, adm, k.Names, t)
	if err != nil {
		return nil, err
	}
	slack := k.Slack
	if slack <= 0 {
		slack = time.Minute
	}
	phys := k.Names.Physical(t)
	after := func(at time.Time) (kadm.ListedOffsets, error) {
		l, err := adm.ListOffsetsAfterMilli(ctx, at.UnixMilli(), phys)
		if err == nil {
			err = l.Error()
		}
		return l, err
	}
	var fromL, toL kadm.ListedOffsets
	if !k.Window.From.IsZero() {
		if fromL, err = after(k.Window.From.Add(-slack)); err != nil {
			return nil, fmt.Errorf("replay: offsets of %s at %s: %w", phys, k.Window.From, err)
		}
	}
	if !k.Window.To.IsZero() {
		if toL, err = after(k.Window.To.Add(slack)); err != nil {
			return nil, fmt.Errorf("replay: offsets of %s at %s: %w", phys, k.Window.To, err)
		}
	}
	var spans []span
	for _, p := range bounds.sortedPartitions(t) {
		b := bounds[t][p]
		s := span{Topic: t, Partition: p, From: b[0], To: b[1]}
		if l, ok := fromL.Lookup(phys, p); ok && l.Offset >= 0 {
			s.From = max(s.From, l.Offset)
		}
		if l, ok := toL.Lookup(phys, p); ok && l.Offset >= 0 {
			s.To = min(s.To, l.Offset)
		}
		if s.From < s.To {
			spans = append(spans, s)
		}
	}
	return spans, nil
}

// CollectDecisions reads every decision of a source into memory, sorted by
// (decided_at, decision id) so that reports list them in a stable order.
func CollectDecisions(ctx context.Context, src DecisionSource) ([]*pb.DecisionRecord, error) {
	var out []*pb.DecisionRecord
	err := src.EachDecision(ctx, func(d *pb.DecisionRecord, _ Position) error {
		out = append(out, d)
		return nil
	})
	slices.SortFunc(out, func(a, b *pb.DecisionRecord) int {
		if a.GetDecidedAtUnixNano() != b.GetDecidedAtUnixNano() {
			if a.GetDecidedAtUnixNano() < b.GetDecidedAtUnixNano() {
				return -1
			}
			return 1
		}
		return strings.Compare(a.GetDecisionId(), b.GetDecisionId())
	})
	return out, err
}
