package events

import (
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// MaxHealthDetailLen bounds a WorkerHealth's detail and observer: they are
// logged and served by GET /v1/workers on every replica.
const MaxHealthDetailLen = 256

// validateHealth holds a WorkerHealth to its rule: a worker id, a known
// reason and source, and a reason that agrees with the direction (recovered
// is the reason of a healthy record and of no other), so an applied record
// always says one thing.
func validateHealth(v *pb.WorkerHealth) error {
	if err := ValidateWorkerID(v.GetWorkerId()); err != nil {
		return err
	}
	if _, ok := pb.HealthReason_name[int32(v.GetReason())]; !ok || v.GetReason() == pb.HealthReason_HEALTH_REASON_UNSPECIFIED {
		return invalid(ReasonHealth, "reason", "worker health of %s: reason %d is not a known reason", v.GetWorkerId(), v.GetReason())
	}
	if _, ok := pb.HealthSource_name[int32(v.GetSource())]; !ok || v.GetSource() == pb.HealthSource_HEALTH_SOURCE_UNSPECIFIED {
		return invalid(ReasonHealth, "source", "worker health of %s: source %d is not a known source", v.GetWorkerId(), v.GetSource())
	}
	if v.GetHealthy() != (v.GetReason() == pb.HealthReason_HEALTH_REASON_RECOVERED) {
		return invalid(ReasonHealth, "reason", "worker health of %s: healthy=%t with reason %s (recovered is the reason of a healthy record, and only of one)",
			v.GetWorkerId(), v.GetHealthy(), v.GetReason())
	}
	if err := maxLen(v.GetDetail(), "detail", MaxHealthDetailLen); err != nil {
		return err
	}
	return maxLen(v.GetObserver(), "observer", MaxHealthDetailLen)
}

// HealthReasonLabel is the metric label of a reason: its enum name without
// the prefix ("scrape_failed", "recovered").
func HealthReasonLabel(r pb.HealthReason) string {
	switch r {
	case pb.HealthReason_HEALTH_REASON_SCRAPE_FAILED:
		return "scrape_failed"
	case pb.HealthReason_HEALTH_REASON_CONNECT_REFUSED:
		return "connect_refused"
	case pb.HealthReason_HEALTH_REASON_ZMQ_DOWN:
		return "zmq_down"
	case pb.HealthReason_HEALTH_REASON_RECOVERED:
		return "recovered"
	}
	return "unspecified"
}

// HealthReasonLabels are every reason's label, for series present from the
// start.
var HealthReasonLabels = []string{"scrape_failed", "connect_refused", "zmq_down", "recovered"}

// HealthSourceLabel is the label of an observer ("ingest_scrape", "door").
func HealthSourceLabel(s pb.HealthSource) string {
	switch s {
	case pb.HealthSource_HEALTH_SOURCE_INGEST_SCRAPE:
		return "ingest_scrape"
	case pb.HealthSource_HEALTH_SOURCE_INGEST_ZMQ:
		return "ingest_zmq"
	case pb.HealthSource_HEALTH_SOURCE_DOOR:
		return "door"
	}
	return "unspecified"
}
