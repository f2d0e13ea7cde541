package ingestbench

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// delivery is what ingest's own metrics say became of a run's messages.
// It is read from the counters rather than from the topic because the
// counters are what `pdrouter ingest` exposes in production: a run that
// passes here is one whose dashboards would have shown no loss either.
type delivery struct {
	produced     float64 // kv-events records acknowledged by Kafka
	stored       float64 // BlockStored events written
	resets       float64 // SourceReset events written, any reason
	gaps         float64 // live sequence gaps
	decodeErrors float64
	frameErrors  float64
	produceErrs  float64
}

// readDelivery sums ingest's counters (over every label) from reg.
func readDelivery(reg *prometheus.Registry) (delivery, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return delivery{}, err
	}
	sum := func(name string, label, value string) float64 {
		var s float64
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		metrics:
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if label != "" && lp.GetName() == label && lp.GetValue() != value {
						continue metrics
					}
				}
				s += m.GetCounter().GetValue()
			}
		}
		return s
	}
	return delivery{
		produced:     sum("pdrouter_ingest_records_produced_total", "", ""),
		stored:       sum("pdrouter_ingest_events_total", "type", "stored"),
		resets:       sum("pdrouter_ingest_source_resets_total", "", ""),
		gaps:         sum("pdrouter_ingest_gaps_total", "", ""),
		decodeErrors: sum("pdrouter_ingest_decode_errors_total", "", ""),
		frameErrors:  sum("pdrouter_ingest_frame_errors_total", "", ""),
		produceErrs:  sum("pdrouter_ingest_produce_errors_total", "", ""),
	}, nil
}

// check returns an error naming every way the run lost or mangled events.
// A clean run of n messages of k events is: one SourceReset (ingest's
// first contact with the source, which has no replay socket) and then every
// message once, so n+1 records acknowledged and n*k events stored.
func (d delivery) check(w Workload) error {
	var errs []error
	want := func(what string, got, want float64) {
		if got != want {
			errs = append(errs, fmt.Errorf("%s: %v, want %v", what, got, want))
		}
	}
	want("records acknowledged by Kafka", d.produced, float64(w.Messages+1))
	want("BlockStored events written", d.stored, float64(w.Messages*w.EventsPerMessage))
	want("source resets (the first contact is the only one expected)", d.resets, 1)
	want("sequence gaps", d.gaps, 0)
	want("undecodable batches", d.decodeErrors, 0)
	want("badly framed messages", d.frameErrors, 0)
	want("records Kafka refused", d.produceErrs, 0)
	if len(errs) > 0 {
		return fmt.Errorf("bench ingest: events were lost or mangled (%d messages of %d events sent): %w",
			w.Messages, w.EventsPerMessage, errors.Join(errs...))
	}
	return nil
}
