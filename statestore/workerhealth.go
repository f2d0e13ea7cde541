package statestore

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/textcut"
)

// Worker health is log state (design.md, "Worker health"). Observers (the
// ingest's scraper, the front door) write a WorkerHealth record on the load
// topic when they see a worker stop or start answering; nothing changes
// until that record is applied here. (zmq_down is a reason the ZMQ
// subscriber may write; none does yet.) Then:
//
//   - a worker's health is its latest applied WorkerHealth record. All of a
//     worker's records share its key and so its partition, which orders
//     them: the last one in that order wins, whatever the observers'
//     clocks say, and however partitions of other topics interleave;
//   - a worker with no record is healthy;
//   - an unhealthy worker is healthy again at the first load sample of it
//     applied after its unhealthy record whose sample time is later than
//     the record's observed time: a scrape that succeeded after the
//     failure was seen. This is how a door's connect_refused (which no
//     ingest knows of, so none writes its recovered record) ends. The
//     state then holds a recovered record made from the sample, at the
//     sample's place on the log. The two times come from two observers'
//     clocks, so a skew between them moves the moment by as much; the
//     result is still a function of the log (both times are in it);
//   - a record stamped at or before the worker's latest tombstone is
//     ignored, and a tombstone forgets the worker's health, as it purges
//     its load samples (load.go): a deregistered worker that registers
//     again starts healthy;
//   - records of ids with no registration apply too (a replica may read a
//     worker's health before its registration), within
//     maxUnregisteredHealth ids; beyond it they are skipped
//     (reasonUnknownWorker), as skip.go bounds slots.
//
// The state keeps the record and where it sits on the log (partition,
// offset): GET /v1/workers says since which record a worker is unhealthy.
// Nothing here reads the wall clock: the record's observed time only moves
// the event-time clock, as every record's does.

// maxUnregisteredHealth bounds the health entries of ids with no
// registration (skip.go explains why they are not simply skipped).
const maxUnregisteredHealth = 1024

// workerHealth is a worker's latest applied health record and its place.
type workerHealth struct {
	rec       *pb.WorkerHealth
	partition int32
	offset    int64
}

// refuseHealth returns the reason to skip a health record, or "".
func (st *state) refuseHealth(h *pb.WorkerHealth) string {
	id := h.GetWorkerId()
	if st.regs[id] != nil || st.health[id] != nil || st.unregHealth < maxUnregisteredHealth {
		return ""
	}
	return reasonUnknownWorker
}

func (st *state) applyHealth(b *pebble.Batch, h *pb.WorkerHealth, partition int32, offset int64) {
	id := h.GetWorkerId()
	old := st.health[id]
	if old == nil && st.regs[id] == nil {
		st.unregHealth++
	}
	if wasUnhealthy := old != nil && !old.rec.GetHealthy(); wasUnhealthy == h.GetHealthy() {
		st.viewDirty = true
		st.stats.healthTransitions = append(st.stats.healthTransitions, healthTransition{id: id, rec: h, partition: partition, offset: offset})
	}
	st.health[id] = &workerHealth{rec: h, partition: partition, offset: offset}
	_ = b.Set(healthKey(id), healthRecordValue(h, partition, offset), nil)
}

// healthFromLoad applies the load-sample rule above.
func (st *state) healthFromLoad(b *pebble.Batch, s *pb.LoadSample, partition int32, offset int64) {
	id := s.GetWorker().GetWorkerId()
	h := st.health[id]
	if h == nil || h.rec.GetHealthy() || s.GetSampleTimeUnixNano() <= h.rec.GetObservedAtUnixNano() {
		return
	}
	st.applyHealth(b, &pb.WorkerHealth{WorkerId: id, Healthy: true, Reason: pb.HealthReason_HEALTH_REASON_RECOVERED,
		Source: pb.HealthSource_HEALTH_SOURCE_INGEST_SCRAPE, ObservedAtUnixNano: s.GetSampleTimeUnixNano(),
		Detail: "a load sample taken after the unhealthy record", Observer: textcut.Truncate(s.GetOrigin(), events.MaxHealthDetailLen)},
		partition, offset)
}

// forgetHealth drops a worker's health (its tombstone).
func (st *state) forgetHealth(b *pebble.Batch, id string, wasRegistered bool) {
	if old := st.health[id]; old != nil {
		if !wasRegistered {
			st.unregHealth--
		}
		if !old.rec.GetHealthy() {
			st.viewDirty = true
		}
		delete(st.health, id)
	}
	_ = b.Delete(healthKey(id), nil)
}

// unhealthy reports whether the worker's latest health record says so.
func (st *state) unhealthy(id string) bool {
	h := st.health[id]
	return h != nil && !h.rec.GetHealthy()
}

// healthRecordValue is the stored form of a health entry: u8 format 1,
// uvarint partition, uvarint offset, the record (deterministic protobuf).
func healthRecordValue(h *pb.WorkerHealth, partition int32, offset int64) []byte {
	v := []byte{1}
	v = binary.AppendUvarint(v, uint64(partition))
	v = binary.AppendUvarint(v, uint64(offset))
	rec, err := events.Marshal(h)
	if err != nil {
		return v // unreachable for a decoded message
	}
	return append(v, rec...)
}

// loadWorkerHealth is the rebuild path of a 'u' key.
func (st *state) loadWorkerHealth(id string, v []byte) error {
	if len(v) < 1 || v[0] != 1 {
		return errBadKey
	}
	p, n := binary.Uvarint(v[1:])
	if n <= 0 || p > 1<<31-1 {
		return errBadKey
	}
	rest := v[1+n:]
	off, n := binary.Uvarint(rest)
	if n <= 0 || off > 1<<63-1 {
		return errBadKey
	}
	h := &pb.WorkerHealth{}
	if err := proto.Unmarshal(rest[n:], h); err != nil {
		return fmt.Errorf("%w: %v", errBadKey, err)
	}
	st.health[id] = &workerHealth{rec: h, partition: int32(p), offset: int64(off)}
	return nil
}

// healthTransition is a change of a worker's health seen by one chunk, for
// the Store's metrics and log lines (applyStats moves it out of the state).
type healthTransition struct {
	id        string
	rec       *pb.WorkerHealth
	partition int32
	offset    int64
}

// HealthInfo is a worker's health as the log says: Healthy with no record
// (Known false) or the latest applied WorkerHealth record and its place on
// the load topic.
type HealthInfo struct {
	Known     bool
	Healthy   bool
	Reason    string // events.HealthReasonLabel
	Source    string // events.HealthSourceLabel
	Detail    string
	Observer  string
	Partition int32
	Offset    int64
	// ObservedAtUnixNano is when the observer saw the transition (its clock).
	ObservedAtUnixNano int64
}

// Health returns the health of a worker id (all its ranks share it).
func (v View) Health(id string) HealthInfo {
	h := v.st.health[id]
	if h == nil {
		return HealthInfo{Healthy: true}
	}
	return HealthInfo{
		Known: true, Healthy: h.rec.GetHealthy(),
		Reason: events.HealthReasonLabel(h.rec.GetReason()), Source: events.HealthSourceLabel(h.rec.GetSource()),
		Detail: h.rec.GetDetail(), Observer: h.rec.GetObserver(),
		Partition: h.partition, Offset: h.offset, ObservedAtUnixNano: h.rec.GetObservedAtUnixNano(),
	}
}

// UnhealthyRef reports whether the worker behind ref is excluded as
// unhealthy (the flag the decider reads in WorkerInfo).
func (v View) UnhealthyRef(ref decider.WorkerRef) bool {
	if ref < 0 || ref >= len(v.st.viewInfos) {
		return false
	}
	return v.st.viewInfos[ref].Unhealthy
}

// logHealth writes one line per applied health transition: every replica
// logs the same lines for the same records, with their place on the log.
func (s *Store) logHealth(ts []healthTransition) {
	for _, t := range ts {
		msg := "statestore: worker unhealthy: the decider excludes it"
		if t.rec.GetHealthy() {
			msg = "statestore: worker healthy again"
		}
		s.log.Warn(msg, "worker", t.id, "reason", events.HealthReasonLabel(t.rec.GetReason()),
			"source", events.HealthSourceLabel(t.rec.GetSource()), "observer", t.rec.GetObserver(), "detail", t.rec.GetDetail(),
			"partition", t.partition, "offset", t.offset)
	}
}
