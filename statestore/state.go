package statestore

import (
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/latmodel"
)

// state is the in-memory materialization. It is owned by a Store, which
// guards it with a RWMutex: apply rules run under the write lock, views
// under the read lock.
type state struct {
	slots   map[workerRank]int32
	workers []*slotState
	byID    map[string][]int32 // worker id → its slots
	free    []int32            // freed slot numbers, reused first
	toFree  []int32            // slots to free at the end of the chunk (freeQueued)
	// unregSlots counts the slots of worker ids with no registration
	// (unknown.go).
	unregSlots int
	idx        *hotIndex
	regs       map[string]*pb.WorkerRegistration
	tombs      map[string]int64 // worker id → Kafka timestamp of its latest tombstone
	// health is each worker id's latest applied health record
	// (workerhealth.go); unregHealth counts those of ids with no
	// registration.
	health      map[string]*workerHealth
	unregHealth int
	// learnedSamples: peers' latency samples moved the model since its
	// gauges were last set (Metrics.observeRows).
	learnedSamples bool
	act            *activeTable
	offsets        map[topicPartition]int64
	// wm caches offsets as a decision record's watermark: every decision
	// until the next chunk is applied records the same one, and building it
	// (sort, allocate) was 2% of a decision. Readers fill it under the read
	// lock (two may race to store equal values); Apply clears it under the
	// write lock after moving offsets. Shared by many records: read-only.
	wm atomic.Pointer[pb.Watermark]

	// The event-time clock (never the wall clock): now is the max event time
	// of every record applied, reqNow that of decisions and outcomes only,
	// so that an engine with a skewed clock cannot expire requests.
	now, reqNow int64

	tierBlocks [numTiers]int64

	// Decision records for lookups (decisions.go).
	dec *decisionLog
	// Approximate mode's predicted entries (approx.go): their expiries, and
	// how many are alive.
	predDue   predHeap
	predicted int64
	// KV-event health (kvhealth.go): slots whose 'h' key must be written at
	// the end of the chunk, and how many slots are flagged.
	healthDirty []int32
	kvMissing   int
	bsMismatch  int // slots flagged by blocksize.go

	// The decider-facing worker list (workers.go rebuildView), and its
	// version (View.WorkersVersion).
	viewDirty bool
	viewGen   uint64
	viewInfos []decider.WorkerInfo
	viewSlots []int32
	slotRef   []int32

	stats   applyStats
	scratch []uint64
	kbuf    []byte
	obuf    []byte // openEntryID's (open.go)
	// replaying: the record being applied was applied before a restart
	// and is read again for the open requests only (Apply, open.go).
	replaying bool
	// pw holds the prefix writes of the Apply in progress (prefixwrites.go);
	// nil outside Apply.
	pw *prefixWrites
	// warmSink keeps the reads of the tables' warm methods from being
	// optimized away.
	warmSink uint64
	vbuf     []byte
	ebuf     []byte // encodeEntry's (active.go)
	dbuf     []byte // appendStoredDecision's (decisions.go)
	hbuf     []byte // applyDeltaDecisionLog's header (decisions.go)
	// storedAt: the position of a committed decision (Store.storedDecisionAt);
	// nil in a state that has no store behind it.
	storedAt func(id string) (int32, int64, bool)
	ybuf     []byte // flushLatency's (latency.go)

	// shares: peers' load as the rows of their snapshots (sharerows.go);
	// own: this replica's snapshots to send (shares.go). Both nil unless
	// the source is SourceLoadShares.
	shares *shareRows
	own    *ownShares

	// The online latency model (latency.go) and its fit as of the last chunk.
	lat    *latmodel.Model
	latFit *decider.LatencyFit
}

// applyStats counts what apply rules saw; the Store moves them into its
// metrics after each chunk, so apply rules stay free of Prometheus.
type applyStats struct {
	blockOps      int64
	removeUnknown int64
	storeUnknown  int64 // offload-store hashes the engine table does not hold
	orphans       int64
	cleared       int64
	resets        int64
	tombstones    int64
	staleLoads    int64
	races         int64
	// decisionCopies: decision records whose id was applied at another
	// position (decisions.go appliedAt).
	decisionCopies int64
	latNoRow       int64 // decisions the latency model could not read (latency.go)
	// openCheckpoints and openReplayed: the open requests' checkpoints
	// written and records read again after a restart (opencheckpoint.go).
	openCheckpoints, openReplayed int64
	// kv-events or load records stamped at or before the worker's latest
	// tombstone, ignored because the tombstone purged (or will purge) them.
	afterTombstone int64
	// shareResults: load-shares records by result (sharerows.go).
	shareResults [numShareResults]int64
	// replicaIDConflicts: load-shares records under this replica's id
	// that another writer wrote (ownShares.readOwn).
	replicaIDConflicts int64
	// Latency samples (sharesamples.go): sent with this writer's
	// snapshots, learned from peers', dropped past maxEnded.
	samplesSent, samplesLearned, samplesDropped, samplesThinned int64
	// healthTransitions are the health changes applied (workerhealth.go).
	healthTransitions []healthTransition
}

type topicPartition struct {
	topic     events.Topic
	partition int32
}

func newState(cfg activeConfig) *state {
	st := &state{
		lat:     latmodel.New(cfg.latency),
		slots:   map[workerRank]int32{},
		byID:    map[string][]int32{},
		idx:     newHotIndex(),
		regs:    map[string]*pb.WorkerRegistration{},
		tombs:   map[string]int64{},
		health:  map[string]*workerHealth{},
		act:     newActiveTable(cfg),
		dec:     newDecisionLog(cfg.decisionRetention),
		offsets: map[topicPartition]int64{},
	}
	if cfg.replica != "" {
		st.shares = newShareRows(cfg.replica, cfg.expiry, cfg.maxWorkers)
		st.own = newOwnShares(cfg.sharesEpoch)
		st.own.samples = newSampleBudget(cfg.samplesPerSecond)
	}
	return st
}

// observe advances the event-time clock.
func (st *state) observe(t int64, requests bool) {
	if t > st.now {
		st.now = t
	}
	if requests && t > st.reqNow {
		st.reqNow = t
	}
}

// applyEnvelope applies one decoded record, or skips it and returns the
// reason (a fixed string, the records_invalid label): a record that
// decodes but that the state's limits refuse (skip.go). Every rule
// tolerates any valid content (FuzzApply checks that).
//
// logTime is the record's Kafka timestamp (the producer's CreateTime, the
// same for every replica). It orders a tombstone against the kv-events and
// load records of the same worker, which live on other topics (load.go).
func (st *state) applyEnvelope(b *pebble.Batch, env *events.Envelope, logTime int64) (skipped string) {
	if env.Tombstone() {
		if env.Topic == events.TopicWorkers {
			st.applyTombstone(b, string(env.Key), logTime)
		}
		return ""
	}
	switch m := env.Message.(type) {
	case *pb.KvEventRecord:
		if r := st.refuseWorkerRecord(m.GetWorker()); r != "" {
			return r
		}
		st.observe(m.GetEventTimeUnixNano(), false)
		if st.beforeTombstone(m.GetWorker().GetWorkerId(), logTime) {
			st.stats.afterTombstone++
			return ""
		}
		st.applyKv(b, m)
	case *pb.LoadSample:
		if r := st.refuseWorkerRecord(m.GetWorker()); r != "" {
			return r
		}
		st.observe(m.GetSampleTimeUnixNano(), false)
		if st.beforeTombstone(m.GetWorker().GetWorkerId(), logTime) {
			st.stats.afterTombstone++
			return ""
		}
		st.applyLoad(b, m)
		st.healthFromLoad(b, m, env.Partition, env.Offset)
	case *pb.WorkerRegistration:
		if r := st.refuseRegistration(m); r != "" {
			return r
		}
		st.observe(m.GetRegisteredAtUnixNano(), false)
		st.applyRegistration(b, m)
	case *pb.DecisionRecord:
		st.observe(m.GetDecidedAtUnixNano(), true)
		st.applyDecision(b, m, env.Partition, env.Offset)
		st.applyDecisionLog(b, m, env.Partition, env.Offset, env.Header)
		st.learnDecision(m)
	case *pb.WorkerHealth:
		if r := st.refuseHealth(m); r != "" {
			return r
		}
		st.observe(m.GetObservedAtUnixNano(), false)
		if st.beforeTombstone(m.GetWorkerId(), logTime) {
			st.stats.afterTombstone++
			return ""
		}
		st.applyHealth(b, m, env.Partition, env.Offset)
	case *pb.OutcomeEvent:
		st.observe(m.GetEventTimeUnixNano(), true)
		st.applyOutcome(b, m)
		st.learnOutcome(m)
	case *pb.LoadDelta:
		if st.shares != nil && m.GetWriterId() != st.shares.replica {
			// Another writer whose id hashes to this replica's partition:
			// its requests are its own, and reach this store as its rows.
			return reasonOtherWriter
		}
		st.applyLoadDelta(b, m, env.Partition, env.Offset)
	case *pb.LoadShares:
		st.applyLoadShares(m)
	}
	return ""
}
