package api

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/textcut"
	"github.com/pdrouter/pdrouter/statestore"
)

// Load deltas (docs/scaling.md, "Load deltas"): with WithLoadDeltas, every
// decision and lifecycle event this replica appends goes with its load
// delta, a compact record on the load-deltas topic that peers of source
// load-deltas apply instead of the whole record. The delta rides in the
// same Append, so in the same group commit and produce request as its
// record: an answered decision has both acknowledged (design.md,
// invariants 5 and D3), and a failed append fails both, which the
// client's retry with the same request_id appends again.

// Kinds of pdrouter_load_delta_entries_total and
// pdrouter_load_deltas_unwritten_total.
const (
	deltaDecision  = "decision"
	deltaLifecycle = "lifecycle"
)

type deltaMetrics struct {
	entries   *prometheus.CounterVec
	unwritten *prometheus.CounterVec
}

func newDeltaMetrics(reg prometheus.Registerer) deltaMetrics {
	m := deltaMetrics{
		entries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_load_delta_entries_total",
			Help: "Load delta entries this replica appended with its decisions and lifecycle events, by kind.",
		}, []string{"kind"}),
		unwritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_load_deltas_unwritten_total",
			Help: "Decisions and lifecycle events appended without their load delta because the delta broke a rule of its record (peers of source load-deltas do not see their load); a bug to report.",
		}, []string{"kind"}),
	}
	for _, k := range []string{deltaDecision, deltaLifecycle} {
		m.entries.WithLabelValues(k)
		m.unwritten.WithLabelValues(k)
	}
	if reg != nil {
		reg.MustRegister(m.entries, m.unwritten)
	}
	return m
}

// withDelta returns recs with the load delta of m (a DecisionRecord or an
// OutcomeEvent) appended, when the server writes deltas. A delta that
// cannot be written is logged and counted, and the record goes alone: the
// audit log never waits on the load a peer sees.
func (s *Server) withDelta(recs []*kgo.Record, m any) []*kgo.Record {
	if !s.cfg.loadDeltas {
		return recs
	}
	d := &pb.LoadDelta{WriterId: textcut.Truncate(s.cfg.replicaID, events.MaxNameLen)}
	var worker *pb.WorkerRef
	kind := deltaDecision
	switch v := m.(type) {
	case *pb.DecisionRecord:
		d.Decisions = []*pb.DecisionDelta{statestore.DecisionDeltaOf(v)}
		worker = v.GetDecodeWorker()
	case *pb.OutcomeEvent:
		d.Lifecycle = []*pb.LifecycleDelta{statestore.LifecycleDeltaOf(v)}
		worker, kind = v.GetDecodeWorker(), deltaLifecycle
	default:
		return recs
	}
	r, err := events.NewRecord(s.deps.Names, events.WorkerKey(worker.GetWorkerId()), d)
	if err != nil {
		s.deltaMet.unwritten.WithLabelValues(kind).Inc()
		s.cfg.log.Warn("load delta not written; peers of source load-deltas miss this load", "kind", kind, "err", err)
		return recs
	}
	s.deltaMet.entries.WithLabelValues(kind).Inc()
	return append(recs, r)
}
