package replay

import (
	"context"
	"io"
	"log/slog"
	"time"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// ExportOptions configure an export.
type ExportOptions struct {
	Format Format
	// JoinOutcomes fills each decision row's outcome columns from the
	// outcomes of its request id.
	JoinOutcomes bool
	// JoinSlack is how far past the window's end outcomes are read, since a
	// request finishes after it is decided; default 15 min. With an open
	// window the whole log is read anyway.
	JoinSlack time.Duration
	Logger    *slog.Logger
}

// ExportStats count what an export wrote.
type ExportStats struct {
	Rows int64 `json:"rows"`
	// Joined is the number of decision rows that found an outcome.
	Joined int64 `json:"joined"`
	// Outcomes is the number of outcome events read for the join.
	Outcomes int64 `json:"outcomes"`
}

// ExportDecisions writes one DecisionRow per decision of the window.
//
// The join reads the outcomes first and keeps one small summary per
// request id in memory (about 100 bytes), then streams the decisions, so
// memory grows with the requests of the window, never with the rows.
func ExportDecisions(ctx context.Context, src *KafkaLog, w io.Writer, o ExportOptions) (ExportStats, error) {
	var st ExportStats
	var joined map[string]*outcomeSummary
	if o.JoinOutcomes {
		ol := *src
		if !ol.Window.To.IsZero() {
			slack := o.JoinSlack
			if slack <= 0 {
				slack = 15 * time.Minute
			}
			ol.Window.To = ol.Window.To.Add(slack)
		}
		joined = map[string]*outcomeSummary{}
		err := ol.EachOutcome(ctx, func(ev *pb.OutcomeEvent, _ Position) error {
			st.Outcomes++
			s := joined[ev.GetRequestId()]
			if s == nil {
				s = &outcomeSummary{}
				joined[ev.GetRequestId()] = s
			}
			s.add(ev)
			return nil
		})
		if err != nil {
			return st, err
		}
	}
	rw, err := NewRowWriter[DecisionRow](w, o.Format, "decisions")
	if err != nil {
		return st, err
	}
	batch := make([]DecisionRow, 0, 512)
	flush := func() error {
		err := rw.Write(batch...)
		batch = batch[:0]
		return err
	}
	err = src.EachDecision(ctx, func(rec *pb.DecisionRecord, pos Position) error {
		row := DecisionRowOf(rec, pos)
		if s := joined[rec.GetRequestId()]; s != nil {
			s.fill(&row)
			st.Joined++
		}
		st.Rows++
		batch = append(batch, row)
		if len(batch) == cap(batch) {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if cerr := rw.Close(); err == nil {
		err = cerr
	}
	return st, err
}

// ExportOutcomes writes one OutcomeRow per outcome event of the window.
func ExportOutcomes(ctx context.Context, src *KafkaLog, w io.Writer, o ExportOptions) (ExportStats, error) {
	var st ExportStats
	rw, err := NewRowWriter[OutcomeRow](w, o.Format, "outcomes")
	if err != nil {
		return st, err
	}
	batch := make([]OutcomeRow, 0, 1024)
	err = src.EachOutcome(ctx, func(ev *pb.OutcomeEvent, pos Position) error {
		st.Rows++
		batch = append(batch, OutcomeRowOf(ev, pos))
		if len(batch) == cap(batch) {
			err := rw.Write(batch...)
			batch = batch[:0]
			return err
		}
		return nil
	})
	if err == nil {
		err = rw.Write(batch...)
	}
	if cerr := rw.Close(); err == nil {
		err = cerr
	}
	return st, err
}

// outcomeSummary is what the join keeps of a request's outcome events.
//
// Rules, so that the joined columns do not depend on the order events were
// read in: ttft_ms is that of the earliest event that reports one
// (normally prefill_done); prefill_done_at is the earliest prefill_done;
// the terminal outcome is the earliest completed or cancelled event, whose
// time is finished_at and which supplies output_tokens and itl_ms_mean.
type outcomeSummary struct {
	events      int32
	ttft        *float64
	ttftAt      int64
	prefillDone *Timestamp
	terminal    *pb.OutcomeEvent
}

func (s *outcomeSummary) add(ev *pb.OutcomeEvent) {
	s.events++
	t := ev.GetEventTimeUnixNano()
	if ev.TtftMs != nil && (s.ttft == nil || t < s.ttftAt) {
		v := ev.GetTtftMs()
		s.ttft, s.ttftAt = &v, t
	}
	switch ev.GetKind() {
	case pb.OutcomeEvent_KIND_PREFILL_DONE:
		if s.prefillDone == nil || Timestamp(t) < *s.prefillDone {
			ts := Timestamp(t)
			s.prefillDone = &ts
		}
	case pb.OutcomeEvent_KIND_COMPLETED, pb.OutcomeEvent_KIND_CANCELLED:
		if s.terminal == nil || t < s.terminal.GetEventTimeUnixNano() {
			s.terminal = ev
		}
	}
}

func (s *outcomeSummary) fill(r *DecisionRow) {
	r.OutcomeEvents = s.events
	r.TTFTMs = s.ttft
	r.PrefillDoneAt = s.prefillDone
	kind := "prefill_done"
	if s.prefillDone == nil {
		kind = "pending"
	}
	if t := s.terminal; t != nil {
		kind = outcomeKind(t.GetKind())
		ft := Timestamp(t.GetEventTimeUnixNano())
		r.FinishedAt = &ft
		r.ITLMsMean = t.ItlMsMean
		if t.OutputTokens != nil {
			n := int64(t.GetOutputTokens())
			r.OutputTokens = &n
		}
	}
	r.Outcome = &kind
}
