package events

import (
	"strings"

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
// the prefix, in lower case ("scrape_failed", "recovered"); "unspecified"
// for a value this build does not know, so labels stay a fixed set.
func HealthReasonLabel(r pb.HealthReason) string {
	return enumLabel(pb.HealthReason_name, int32(r), "HEALTH_REASON_")
}

// HealthReasonLabels are every reason's label, for series present from the
// start.
var HealthReasonLabels = []string{"scrape_failed", "connect_refused", "zmq_down", "recovered"}

// HealthSourceLabel is the label of an observer ("ingest_scrape", "door").
func HealthSourceLabel(s pb.HealthSource) string {
	return enumLabel(pb.HealthSource_name, int32(s), "HEALTH_SOURCE_")
}

func enumLabel(names map[int32]string, v int32, prefix string) string {
	n, ok := names[v]
	if !ok || v == 0 {
		return "unspecified"
	}
	return strings.ToLower(strings.TrimPrefix(n, prefix))
}
