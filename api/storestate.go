package api

import (
	"context"
	"strconv"
	"time"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/statestore"
)

// Lagger reports how far the store is behind the log (the Materializer).
type Lagger interface {
	Lag(ctx context.Context) (statestore.Lag, error)
}

// StoreState is the State of a replica: its statestore.Store, and the
// materializer that keeps it current.
type StoreState struct {
	Store *statestore.Store
	Lag   Lagger
	// Snapshot describes the newest local snapshot, when there is one.
	Snapshot func() *SnapshotInfo
}

// StoreState has the optional capabilities too (state.go): checked here,
// since the server would otherwise fall back without them in silence.
var (
	_ State                      = (*StoreState)(nil)
	_ DecisionExpecter           = (*StoreState)(nil)
	_ PositionedDecisionRecorder = (*StoreState)(nil)
)

// Read implements State.
func (s *StoreState) Read(fn func(v decider.View, watermark *pb.Watermark)) {
	s.Store.Read(func(v statestore.View) { fn(v, v.WatermarkProto()) })
}

// WaitApplied implements State.
func (s *StoreState) WaitApplied(ctx context.Context, after Offsets) error {
	var want statestore.Offsets
	for _, t := range events.AllTopics {
		for p, off := range after[t] {
			want = append(want, statestore.PartitionOffset{Topic: t, Partition: p, Next: off + 1})
		}
	}
	return s.Store.WaitApplied(ctx, want)
}

// RecordLocalDecision implements State. The record was validated when it
// was framed for the log, so an error here is a bug worth a panic-free log
// line, not a failed request: the decision is already durable.
func (s *StoreState) RecordLocalDecision(rec *pb.DecisionRecord) {
	_ = s.Store.RecordLocalDecision(rec)
}

// Decision implements State.
func (s *StoreState) Decision(id string) (StoredDecision, bool) {
	d, ok := s.Store.Decision(id)
	return StoredDecision(d), ok
}

// DecisionForRequest implements State.
func (s *StoreState) DecisionForRequest(id string) (StoredDecision, bool) {
	d, ok := s.Store.DecisionForRequest(id)
	return StoredDecision(d), ok
}

// DecisionRefForRequest implements State.
func (s *StoreState) DecisionRefForRequest(id string) (DecisionRef, bool) {
	r, ok := s.Store.DecisionRefForRequest(id)
	return DecisionRef(r), ok
}

// Workers implements State.
func (s *StoreState) Registered(id string) (dpSize uint32, ok bool) {
	s.Store.Read(func(v statestore.View) {
		var reg *pb.WorkerRegistration
		if reg, ok = v.RegistrationOf(id); ok {
			dpSize = reg.GetDpSize()
		}
	})
	return dpSize, ok
}

// HTTPURL implements HTTPURLState: one registration lookup.
func (s *StoreState) HTTPURL(workerID string) string {
	var url string
	s.Store.Read(func(v statestore.View) {
		if reg, ok := v.RegistrationOf(workerID); ok {
			url = reg.GetHttpUrl()
		}
	})
	return url
}

func (s *StoreState) Workers() []WorkerStatus {
	var out []WorkerStatus
	s.Store.Read(func(v statestore.View) {
		ws := v.Workers()
		out = make([]WorkerStatus, len(ws))
		for ref := range ws {
			w := &ws[ref]
			id, rank, _ := events.ParseWorkerRank(w.ID)
			st := WorkerStatus{WorkerID: id, DPRank: rank, Pool: string(w.Pool), Model: w.Model, BlockSize: w.BlockSize}
			// Copies: the view's memory is the store's, rebuilt in place after
			// the read, and the status outlives it.
			if total := w.TotalKVBlocks; total > 0 {
				st.TotalKVBlocks = &total
			}
			if batched := w.MaxNumBatchedTokens; batched > 0 {
				st.MaxNumBatchedTokens = &batched
			}
			if reg, ok := v.Registration(ref); ok {
				st.KVEventsEndpoint, st.MetricsURL = reg.GetKvEventsEndpoint(), reg.GetMetricsUrl()
				st.DPSize, st.HTTPURL = reg.GetDpSize(), reg.GetHttpUrl()
			}
			held := v.BlocksHeld(ref)
			st.CachedBlocks = held[0] + held[1] + held[2]
			act := v.Active(ref)
			st.ActiveDecodeBlocks, st.ActivePrefillTokens = act.DecodeBlocks, act.PrefillTokens
			if li, ok := v.LoadInfo(ref); ok {
				st.Load = &WorkerLoad{
					SampleTime: li.At.UTC(), AgeSeconds: li.Age.Seconds(),
					NumRequestsRunning: li.Sample.NumRequestsRunning, NumRequestsWaiting: li.Sample.NumRequestsWaiting,
					KVUsedBlocks: li.Sample.KvUsedBlocks, KVTotalBlocks: li.Sample.KvTotalBlocks,
					ActivePrefillTokens: li.Sample.ActivePrefillTokens,
				}
			}
			st.KVEventsMissing, st.KVEventsNote = v.KvEventsMissing(ref)
			st.KVEventsBlockSize, st.KVBlockSizeMismatch, st.KVBlockSizeNote = v.KvBlockSize(ref)
			st.Health = workerHealthOf(v.Health(id))
			out[ref] = st
		}
	})
	return out
}

// workerHealthOf is the API's form of a worker's health.
func workerHealthOf(h statestore.HealthInfo) WorkerHealth {
	out := WorkerHealth{Healthy: h.Healthy}
	if !h.Known {
		return out
	}
	at := time.Unix(0, h.ObservedAtUnixNano).UTC()
	out.Reason, out.Source, out.Observer, out.Detail, out.ObservedAt = h.Reason, h.Source, h.Observer, h.Detail, &at
	out.Since = &LogPosition{Topic: string(events.TopicLoad), Partition: h.Partition, Offset: h.Offset}
	return out
}

// Cell implements State.
func (s *StoreState) Cell() events.Cell { return s.Store.Cell() }

// Applies implements State.
func (s *StoreState) Applies(t events.Topic) bool { return s.Store.Source().Applies(t) }

// Status implements State.
func (s *StoreState) Status(ctx context.Context) (StateStatus, error) {
	st := StateStatus{Cell: s.Cell().String(), Applied: map[string]map[string]int64{}, Lag: map[string]map[string]int64{}}
	for _, o := range s.Store.Offsets() {
		put(st.Applied, o.Topic, o.Partition, o.Next)
	}
	d, err := s.Store.Digest()
	if err != nil {
		return st, err
	}
	st.Digest = d.String()
	if s.Lag != nil {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		lag, err := s.Lag.Lag(ctx)
		if err != nil {
			return st, err
		}
		for _, p := range lag.Partitions {
			put(st.Lag, p.Topic, p.Partition, p.Lag)
		}
		st.TotalLag = lag.Total
	}
	if s.Snapshot != nil {
		st.Snapshot = s.Snapshot()
	}
	return st, nil
}

// TotalLag implements State.
func (s *StoreState) TotalLag(ctx context.Context) (int64, error) {
	if s.Lag == nil {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lag, err := s.Lag.Lag(ctx)
	return lag.Total, err
}

func put(m map[string]map[string]int64, t events.Topic, p int32, v int64) {
	if m[string(t)] == nil {
		m[string(t)] = map[string]int64{}
	}
	m[string(t)][strconv.Itoa(int(p))] = v
}

// ExpectLocalDecision implements DecisionExpecter.
func (s *StoreState) ExpectLocalDecision(rec *pb.DecisionRecord, value []byte) {
	s.Store.ExpectLocalDecision(rec, value)
}

// UnexpectLocalDecision implements DecisionExpecter.
func (s *StoreState) UnexpectLocalDecision(id string) { s.Store.UnexpectLocalDecision(id) }

// RecordLocalDecisionAt implements PositionedDecisionRecorder: a local
// decision whose log copy, value (rec encoded, as appended), is at
// (partition, offset) of the decisions topic, and its load delta at delta. The store knows from its offsets whether it applied
// the copy, without reading Pebble, and reads the copy back without
// decoding it.
func (s *StoreState) RecordLocalDecisionAt(rec *pb.DecisionRecord, value []byte, at, delta Position) {
	if at.Topic != events.TopicDecisions || at.Offset < 0 {
		_ = s.Store.RecordLocalDecision(rec)
		return
	}
	if delta.Topic != events.TopicLoadDeltas || delta.Offset < 0 {
		delta.Partition, delta.Offset = -1, -1
	}
	_ = s.Store.RecordLocalDecisionWithDelta(rec, value, at.Partition, at.Offset, delta.Partition, delta.Offset)
}

// WorkersVersion implements WorkersVersionState.
func (s *StoreState) WorkersVersion() uint64 {
	var g uint64
	s.Store.Read(func(v statestore.View) { g = v.WorkersVersion() })
	return g
}
