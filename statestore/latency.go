package statestore

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/latmodel"
)

// The online latency model (docs/slo-policy.md, package latmodel): every decision's
// features joined with its outcomes' TTFT and ITL. It is state like the rest: keys
// 'y' 'e' decisionID hold each join entry's facts (latmodel's canonical encoding) and
// 'y' 's' the window's integer sums, the model bytes, so the model is in the digest and
// in snapshots. The sums are derived from the entries again when the store opens.
//
// The model's clock is reqNow, the decisions and outcomes clock, and it is a function
// of the set of facts (latmodel's order-independence argument), so replicas reading
// the two topics in different interleavings hold byte-identical models.

var keyLatencySums = []byte{famLatency, 's'}

func latencyEntryKey(id string) []byte { return append([]byte{famLatency, 'e'}, id...) }

// learnDecision joins a decision's features: the path it took and that path's
// inputs, read from its candidate rows by the decider's own definition
// (decider.PathInputs). A record without its decode row teaches nothing.
func (st *state) learnDecision(d *pb.DecisionRecord) {
	st.lat.Advance(st.reqNow)
	path, in, ok := latencySample(d)
	if !ok {
		st.stats.latNoRow++
		return
	}
	st.lat.Decision(d.GetDecisionId(), d.GetDecidedAtUnixNano(), path, &in)
}

// latencySample returns the path and features a decision record teaches
// the latency model: those of its decode row and, for a remote prefill,
// its prefill row; not ok when the record lacks a row it needs. Load
// deltas carry the same sample (DecisionDeltaOf).
func latencySample(d *pb.DecisionRecord) (decider.LatencyPath, decider.LatencyInputs, bool) {
	dw, pw := d.GetDecodeWorker(), d.GetPrefillWorker()
	var drow, prow *pb.Candidate
	for _, c := range d.GetCandidates() {
		w := c.GetWorker()
		switch {
		case drow == nil && c.GetPool() == pb.Pool_POOL_DECODE && w.GetWorkerId() == dw.GetWorkerId() && w.GetDpRank() == dw.GetDpRank():
			drow = c
		case prow == nil && pw != nil && c.GetPool() == pb.Pool_POOL_PREFILL && w.GetWorkerId() == pw.GetWorkerId() && w.GetDpRank() == pw.GetDpRank():
			prow = c
		}
	}
	if drow == nil {
		return 0, decider.LatencyInputs{}, false
	}
	path := decider.PathLocal
	if d.GetMode() != string(decider.ModeLocal) {
		if prow == nil {
			return 0, decider.LatencyInputs{}, false
		}
		path = decider.PathRemote
	}
	dc, pc := latencyRow(drow), latencyRow(prow)
	return path, decider.PathInputs(path, int64(d.GetPromptTokens()), int64(d.GetEffectiveIsl()), &dc, &pc), true
}

// latencyRow is the part of a record's row the features read (nil: a zero row).
func latencyRow(c *pb.Candidate) decider.Candidate {
	return decider.Candidate{BlockSize: int(c.GetBlockSize()), OverlapBlocks: int(c.GetOverlapBlocks()),
		HostBlocks: int(c.GetHostBlocks()), DiskBlocks: int(c.GetDiskBlocks()),
		ActivePrefillTokens: c.GetActivePrefillTokens(), ActiveDecodeBlocks: c.GetActiveDecodeBlocks(),
		ActiveRequests: c.GetActiveRequests(), RecentLocalPrefill: c.GetRecentLocalPrefill(),
		TotalKVBlocks: c.GetTotalKvBlocks(), PotentialDecodeBlocks: c.GetPotentialDecodeBlocks(),
		LoadKnown: c.GetLoadKnown(), LoadKVUsedBlocks: c.GetLoadKvUsedBlocks()}
}

// learnOutcome joins what an outcome measured: a TTFT when it carries one, a mean ITL
// when a completion carries one over at least two output tokens.
func (st *state) learnOutcome(o *pb.OutcomeEvent) {
	st.lat.Advance(st.reqNow)
	ttft, itl := -1.0, -1.0
	if o.TtftMs != nil {
		ttft = o.GetTtftMs()
	}
	if o.GetKind() == pb.OutcomeEvent_KIND_COMPLETED && o.ItlMsMean != nil && o.GetOutputTokens() >= 2 {
		itl = o.GetItlMsMean()
	}
	if ttft < 0 && itl < 0 {
		return
	}
	st.lat.Outcome(o.GetDecisionId(), o.GetEventTimeUnixNano(), ttft, itl)
}

// flushLatency writes the entries and sums the chunk changed and refits the model, so
// that views see the fit of the state they read.
//
// A store of open requests writes neither: the model is part of the
// family, in memory, and reaches Pebble in its checkpoints
// (opencheckpoint.go): an entry changed several times between two of them
// is written once, in the checkpoint's batch, and the sums never.
func (st *state) flushLatency(b *pebble.Batch) {
	ids, sums := st.lat.TakeDirty()
	if f := st.act.open; f != nil {
		for _, id := range ids {
			f.latDirty[id] = struct{}{}
		}
		st.latFit = st.lat.Fit()
		return
	}
	for _, id := range ids {
		st.writeLatencyEntry(b, latencyEntryKey(id), id)
	}
	if sums {
		st.ybuf = st.lat.AppendSums(st.ybuf[:0])
		_ = b.Set(keyLatencySums, st.ybuf, nil)
	}
	st.latFit = st.lat.Fit()
}

// writeLatencyEntry writes entry id of the model under key, or deletes the
// key when the model no longer holds the entry.
func (st *state) writeLatencyEntry(b *pebble.Batch, key []byte, id string) {
	var ok bool
	st.ybuf, ok = st.lat.AppendEntry(st.ybuf[:0], id)
	if ok {
		_ = b.Set(key, st.ybuf, nil)
	} else {
		_ = b.Delete(key, nil)
	}
}

// LatencyFit implements decider.LatencyModel: the fit of the state the view reads.
func (v View) LatencyFit() *decider.LatencyFit { return v.st.latFit }

// LatencyStats are the latency model's counters, for tools and tests.
func (v View) LatencyStats() latmodel.Stats { return v.st.lat.Stats() }

// latencyMetrics export the model's health.
type latencyMetrics struct {
	samples *prometheus.GaugeVec
	entries prometheus.Gauge
	dropped *prometheus.CounterVec
	prev    latmodel.Stats
	// Children set at every Apply, resolved once: by path and target, and
	// by reason (latDropReasons).
	sampleGauges [decider.NumPaths][decider.NumTargets]prometheus.Gauge
	droppedBy    [numLatDrops]prometheus.Counter
}

// Reasons of pdrouter_latency_model_dropped_total.
const (
	latDropLate       = "late"
	latDropNoDecision = "no_decision_id"
	latDropFull       = "max_entries"
	latDropAccFull    = "accumulator_full"
	latDropNoRow      = "no_candidate_row"
	latDropSampled    = "sampled"
	latDropIDTime     = "id_time"
)

// The droppedBy index of each reason.
const (
	latDropLateIdx = iota
	latDropNoDecisionIdx
	latDropFullIdx
	latDropAccFullIdx
	latDropNoRowIdx
	latDropSampledIdx
	latDropIDTimeIdx
	numLatDrops
)

// latDropReasons are the reasons by droppedBy index.
var latDropReasons = [numLatDrops]string{
	latDropLateIdx: latDropLate, latDropNoDecisionIdx: latDropNoDecision, latDropFullIdx: latDropFull,
	latDropAccFullIdx: latDropAccFull, latDropNoRowIdx: latDropNoRow, latDropSampledIdx: latDropSampled,
	latDropIDTimeIdx: latDropIDTime,
}

func newLatencyMetrics() *latencyMetrics {
	m := &latencyMetrics{
		samples: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pdrouter_latency_model_samples",
			Help: "Samples in the latency model's window, by path and target (docs/slo-policy.md)."}, []string{"path", "target"}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pdrouter_latency_model_entries",
			Help: "Join entries (decisions and outcomes in the window) the latency model holds."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdrouter_latency_model_dropped_total",
			Help: "Facts the latency model did not join, by reason."}, []string{"reason"}),
	}
	for p, pn := range latencyPathLabels {
		for t, tn := range latencyTargetLabels {
			m.sampleGauges[p][t] = m.samples.WithLabelValues(pn, tn)
		}
	}
	for i, r := range latDropReasons {
		m.droppedBy[i] = m.dropped.WithLabelValues(r)
	}
	return m
}

func (m *latencyMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.samples, m.entries, m.dropped}
}

// observe sets the gauges and adds the counters' increments since the last call.
func (m *latencyMetrics) observe(st *state) {
	s := st.lat.Stats()
	m.droppedBy[latDropLateIdx].Add(float64(s.Late - m.prev.Late))
	m.droppedBy[latDropNoDecisionIdx].Add(float64(s.NoDecision - m.prev.NoDecision))
	m.droppedBy[latDropFullIdx].Add(float64(s.Full - m.prev.Full))
	m.droppedBy[latDropAccFullIdx].Add(float64(s.AccFull - m.prev.AccFull))
	m.droppedBy[latDropSampledIdx].Add(float64(s.Sampled - m.prev.Sampled))
	m.droppedBy[latDropIDTimeIdx].Add(float64(s.IDTime - m.prev.IDTime))
	m.prev = s
	m.entries.Set(float64(s.Entries))
	var f decider.LatencyFit
	if st.latFit != nil {
		f = *st.latFit
	}
	for p := range m.sampleGauges {
		for t, g := range m.sampleGauges[p] {
			g.Set(float64(f.Samples[p][t]))
		}
	}
}

// The path and target labels of pdrouter_latency_model_samples, indexed by
// decider.LatencyPath and decider.LatencyTarget.
var (
	latencyPathLabels   = [decider.NumPaths]string{"local", "remote"}
	latencyTargetLabels = [decider.NumTargets]string{"ttft", "itl"}
)
