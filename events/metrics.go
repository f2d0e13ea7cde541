package events

import "github.com/prometheus/client_golang/prometheus"

// DecodeMetrics counts what consumers decode. Labels are bounded: topic is
// one of the five logical topics (or "foreign"), reason one of the Err* kinds.
type DecodeMetrics struct {
	Decoded *prometheus.CounterVec
	Invalid *prometheus.CounterVec
	// decoded: Decoded's child per logical topic, resolved once (Observe
	// runs per record); read-only after NewDecodeMetrics.
	decoded map[Topic]prometheus.Counter
}

// NewDecodeMetrics creates the counters and registers them on reg (which may
// be nil, for tools that only read the counts).
func NewDecodeMetrics(reg prometheus.Registerer) *DecodeMetrics {
	m := &DecodeMetrics{
		Decoded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_records_decoded_total",
			Help: "Records decoded from the event log, by logical topic.",
		}, []string{"topic"}),
		Invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_records_invalid_total",
			Help: "Records that could not be decoded and were skipped, by logical topic and reason.",
		}, []string{"topic", "reason"}),
	}
	// The topics are known: their series exist at 0 from the start.
	m.decoded = make(map[Topic]prometheus.Counter, len(AllTopics))
	for _, t := range AllTopics {
		m.decoded[t] = m.Decoded.WithLabelValues(string(t))
	}
	if reg != nil {
		reg.MustRegister(m.Decoded, m.Invalid)
	}
	return m
}

// Observe counts the result of one Decode call.
func (m *DecodeMetrics) Observe(names Names, physicalTopic string, err error) {
	t, ok := names.Logical(physicalTopic)
	label := string(t)
	if !ok {
		label = "foreign"
	}
	if err != nil {
		m.Invalid.WithLabelValues(label, Reason(err)).Inc()
		return
	}
	if c := m.decoded[t]; ok && c != nil {
		c.Inc()
		return
	}
	m.Decoded.WithLabelValues(label).Inc()
}
