package statestore

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/rejects"
)

// Metrics are the store's Prometheus series, registered on the Registerer
// the caller passes (never a global one), so tests and several stores in
// one process do not collide. Labels are bounded: topic is one of the five
// logical topics, tier one of three, partition bounded by the declared
// partition counts.
type Metrics struct {
	latency       *latencyMetrics
	decode        *events.DecodeMetrics
	rejected      *rejects.Counter
	applied       *prometheus.CounterVec
	applySeconds  prometheus.Histogram
	offset        *prometheus.GaugeVec
	lag           *prometheus.GaugeVec
	topicLag      *prometheus.GaugeVec
	blocks        *prometheus.GaugeVec
	workers       *prometheus.GaugeVec
	removeUnknown prometheus.Counter
	storeUnknown  prometheus.Counter
	orphans       prometheus.Counter
	resets        *prometheus.CounterVec
	staleLoads    prometheus.Counter
	afterTomb     prometheus.Counter
	active        prometheus.Gauge
	races         prometheus.Counter
	copies        prometheus.Counter
	indexBytes    prometheus.Gauge
	kvMissing     prometheus.Gauge
	bsMismatch    prometheus.Gauge
	predicted     prometheus.Gauge
	chainBytes    prometheus.Gauge
	chainsRead    *prometheus.CounterVec
	// The open requests (open.go), with Options.PeerSums.
	openRequests    prometheus.Gauge
	openCheckpoints prometheus.Counter
	openReplayed    prometheus.Counter
	walk            *prometheus.CounterVec
	diskSlow        prometheus.Counter
	cell, cells     prometheus.Gauge
	// Load shares (sharerows.go), with SourceLoadShares.
	shareRecords *prometheus.CounterVec
	// shareRecordsBy: shareRecords' series by result index, looked up
	// once: a peer adds to one with every batch it applies.
	shareRecordsBy     [numShareResults]prometheus.Counter
	replicaIDConflicts prometheus.Counter
	// latencySamples: pdrouter_statestore_latency_samples_total by result
	// (sent, learned, dropped).
	latencySamples               [len(latencySampleResults)]prometheus.Counter
	latencySamplesVec            *prometheus.CounterVec
	shareRowsHeld, shareCounting prometheus.Gauge
	// Worker health (workerhealth.go).
	healthTransitions *prometheus.CounterVec
	unhealthy         prometheus.Gauge
	// The walk's children, resolved once: MatchPrefix adds to them on the
	// hot path.
	walkPredicted, walkLinked, walkLookedUp prometheus.Counter
	// Children observeState and addStats set at every Apply, resolved once
	// (a label lookup hashes its values): by tier, by workerSeries index,
	// by clear cause, and per partition as the state first names it
	// (observeState's, under the store's lock).
	tierBlocks   [numTiers]prometheus.Gauge
	workerGauges [len(workerSeries)]prometheus.Gauge
	resetsBy     [len(clearCauses)]prometheus.Counter
	offsets      map[topicPartition]prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, dm *events.DecodeMetrics) *Metrics {
	if dm == nil {
		dm = events.NewDecodeMetrics(reg)
	}
	m := &Metrics{
		latency:  newLatencyMetrics(),
		decode:   dm,
		rejected: rejects.For(reg),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_statestore_applied_records_total",
			Help: "Records applied to the state, by logical topic.",
		}, []string{"topic"}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pdrouter_statestore_apply_batch_duration_seconds",
			Help:    "Time to apply one polled batch, Pebble commit included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		offset: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pdrouter_statestore_offset",
			Help: "Next offset to apply, by logical topic and partition.",
		}, []string{"topic", "partition"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pdrouter_statestore_lag_records",
			Help: "End offset minus applied offset, by logical topic and partition (as of the last lag check).",
		}, []string{"topic", "partition"}),
		topicLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pdrouter_consumer_lag_records",
			Help: "Records the state is behind the log, by logical topic (sum over partitions, as of the last lag check).",
		}, []string{"topic"}),
		blocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pdrouter_statestore_blocks",
			Help: "Cached (block, worker) entries held, by tier.",
		}, []string{"tier"}),
		workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pdrouter_workers",
			Help: "Registered (worker, dp rank) pairs by pool and state: ready, unhealthy (its latest health record), unavailable, or kv_events_missing (a decode worker that sends load but no KV events).",
		}, []string{"pool", "state"}),
		removeUnknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdrouter_kv_remove_unknown_total",
			Help: "BlockRemoved hashes (or tiers) the worker was not known to hold; tolerated.",
		}),
		storeUnknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdrouter_kv_store_unknown_total",
			Help: "Engine hashes of offload BlockStored events (host or disk, no tokens) the worker's engine table does not hold; skipped, never guessed.",
		}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdrouter_kv_orphan_blocks_total",
			Help: "Stored blocks whose parent was unknown: kept, not indexed.",
		}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_kv_worker_clears_total",
			Help: "Whole prefix tables dropped, by cause (cleared, source_reset, tombstone).",
		}, []string{"cause"}),
		staleLoads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdrouter_load_samples_stale_total",
			Help: "Load samples older than the one held; ignored.",
		}),
		afterTomb: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdrouter_statestore_records_before_tombstone_total",
			Help: "kv-events and load records stamped at or before their worker's tombstone; ignored.",
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pdrouter_active_requests",
			Help: "Requests carrying decode blocks in the router-side accounting (this replica's pending decisions included).",
		}),
		races: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdrouter_active_decision_races_total",
			Help: "Decisions of other replicas read while this replica had an unconfirmed decision on the same decode worker.",
		}),
		copies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdrouter_decision_copies_total",
			Help: "Decision records whose decision id was already applied at another position of the decisions topic (an append retried under another key, a copied record); the copy at the lowest position is kept.",
		}),
		indexBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pdrouter_statestore_index_bytes",
			Help: "Estimated heap bytes of the hot index and the engine hash tables.",
		}),
		kvMissing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pdrouter_kv_events_missing_workers",
			Help: "Decode (worker, dp rank) pairs that send load samples but no KV events (see GET /v1/workers): with conditional disaggregation on they can never bypass remote prefill.",
		}),
		bsMismatch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pdrouter_kv_block_size_mismatch_workers",
			Help: "(worker, dp rank) pairs whose latest BlockStored event has another block size than their registration (see GET /v1/workers): their prefix overlap is always 0.",
		}),
		predicted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pdrouter_statestore_predicted_blocks",
			Help: "Approximate mode: predicted (block, worker) device entries alive.",
		}),
		chainBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pdrouter_statestore_active_chain_bytes",
			Help: "Heap bytes of the hash chains held for active requests (memory only; read back from the decisions topic at start).",
		}),
		chainsRead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_statestore_active_chains_read_back_total",
			Help: "Active requests' hash chains read back from the decisions topic when the store opened, by result: recovered, or lost (counted as blocks without a hash until the request ends).",
		}, []string{"result"}),
	}
	m.openRequests = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "pdrouter_statestore_open_requests",
		Help: "Requests of the log held in memory as open requests (--peer-requests memory): from their decision until their partition's clock passes their end, expiry and recent window. 0 when they are kept as facts.",
	})
	m.openCheckpoints = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pdrouter_statestore_open_checkpoints_total",
		Help: "Checkpoints of the open requests written to the store (every 5s of the log's clock, and at close and snapshot): a restart reads the load deltas since the last one again.",
	})
	m.openReplayed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pdrouter_statestore_open_replayed_records_total",
		Help: "Load-delta records read again after a restart for the open requests only (those since their last checkpoint).",
	})
	m.walk = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdrouter_statestore_prefix_walk_blocks_total",
		Help: "Blocks of overlap queries (MatchPrefix) by how the hot index found them: predicted (the arena entry next to the block before), linked (where the chain went on last) or looked_up (hash table). A growing looked_up share means the arena has drifted from chain order; a restart lays it out again.",
	}, []string{"step"})
	m.walkPredicted, m.walkLinked, m.walkLookedUp = m.walk.WithLabelValues("predicted"), m.walk.WithLabelValues("linked"), m.walk.WithLabelValues("looked_up")
	m.cell = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "pdrouter_statestore_cell",
		Help: "The cell of the log this store holds (--cell i/n: i), 0 for the whole log.",
	})
	m.cells = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "pdrouter_statestore_cells",
		Help: "How many cells the log is split into (--cell i/n: n), 1 for the whole log; the replica applies the partitions p with p mod n = i.",
	})
	m.diskSlow = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pdrouter_statestore_disk_slow_total",
		Help: "Pebble file operations still running after 5s (Pebble's disk health check): a sign of a saturated or failing data disk.",
	})

	m.shareRecords = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdrouter_statestore_share_records_total",
		Help: "Load-shares records applied (--load-deltas snapshots), by result: applied; stale_seq (a seq at or below the writer's latest, ignored); expired (already past the active expiry when read, counts nothing); too_many_writers (refused whole); too_many_workers (a share of a new worker past the per-writer or the total bound of rows refused, the others applied).",
	}, []string{"result"})
	m.shareRowsHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "pdrouter_statestore_share_rows",
		Help: "Rows of writers' load shares held in memory, one per (writer, worker, dp rank) with a nonzero share, this replica's own included.",
	})
	m.shareCounting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "pdrouter_statestore_share_rows_counting",
		Help: "Rows of other writers' load shares that count in the workers' active load now (not expired).",
	})
	for i, r := range shareResults {
		m.shareRecordsBy[i] = m.shareRecords.WithLabelValues(r)
	}
	m.latencySamplesVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdrouter_statestore_latency_samples_total",
		Help: "Latency samples of --load-deltas snapshots, what a replica's latency model joined of one of its requests that ended, by result: sent (with this replica's snapshots), learned (from a peer's snapshots), dropped (more ended requests waiting than a replica keeps), thinned (past --latency-samples-per-second). The replica's own model learned the dropped and thinned ones all the same.",
	}, []string{"result"})
	for i, r := range latencySampleResults {
		m.latencySamples[i] = m.latencySamplesVec.WithLabelValues(r)
	}
	m.replicaIDConflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pdrouter_statestore_replica_id_conflicts_total",
		Help: "Load-shares records under this replica's --replica-id that it did not write (--load-deltas snapshots): another replica of the group runs with the same id. Their snapshots then replace each other's rows on every peer, and each misses the other's load. Give every replica its own id.",
	})
	m.healthTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdrouter_worker_health_transitions_total",
		Help: "Worker health changes applied from the log (WorkerHealth records on the load topic), by the health they lead to (healthy, unhealthy) and the record's reason.",
	}, []string{"to", "reason"})
	m.unhealthy = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "pdrouter_workers_unhealthy",
		Help: "Registered worker ids whose latest health record says they stopped answering: the decider excludes them (excluded=unhealthy) until a recovered record.",
	})

	// Series whose label values are known exist at 0 from the start, so
	// dashboards and alerts see 0 rather than nothing; the partitions of a
	// topic are known once the materializer discovers them (partitionKnown).
	for _, t := range events.AllTopics {
		m.applied.WithLabelValues(string(t))
		m.topicLag.WithLabelValues(string(t))
	}
	for _, r := range [...]string{chainRecovered, chainLost} {
		m.chainsRead.WithLabelValues(r)
	}
	for _, r := range events.HealthReasonLabels {
		to := healthUnhealthy
		if r == "recovered" {
			to = healthHealthy
		}
		m.healthTransitions.WithLabelValues(to, r)
	}
	for i, pw := range workerSeries {
		m.workerGauges[i] = m.workers.WithLabelValues(pw.pool, pw.state)
	}
	for t := Tier(0); t < numTiers; t++ {
		m.tierBlocks[t] = m.blocks.WithLabelValues(t.String())
	}
	for i, c := range clearCauses {
		m.resetsBy[i] = m.resets.WithLabelValues(c)
	}
	m.offsets = map[topicPartition]prometheus.Gauge{}
	// The series of refusals exist at 0 from the start (skip.go).
	m.rejected.Init(rejects.Registration, reasonTooManyWorkers)
	m.decode.Invalid.WithLabelValues(string(events.TopicWorkers), reasonTooManyWorkers)
	for _, t := range []events.Topic{events.TopicKvEvents, events.TopicLoad} {
		m.decode.Invalid.WithLabelValues(string(t), reasonDPRank)
		m.decode.Invalid.WithLabelValues(string(t), reasonUnknownWorker)
	}
	if reg != nil {
		reg.MustRegister(m.applied, m.applySeconds, m.offset, m.lag, m.topicLag, m.blocks, m.workers, m.removeUnknown, m.storeUnknown,
			m.orphans, m.resets, m.staleLoads, m.afterTomb, m.active, m.races, m.copies, m.indexBytes, m.kvMissing, m.bsMismatch, m.predicted, m.walk, m.diskSlow,
			m.chainBytes, m.chainsRead, m.cell, m.cells, m.healthTransitions, m.unhealthy, m.openRequests, m.openCheckpoints, m.openReplayed,
			m.shareRecords, m.shareRowsHeld, m.shareCounting, m.replicaIDConflicts, m.latencySamplesVec)
		reg.MustRegister(m.latency.collectors()...)
	}
	return m
}

// Causes of pdrouter_kv_worker_clears_total.
const (
	causeCleared     = "cleared"
	causeSourceReset = "source_reset"
	causeTombstone   = "tombstone"
)

// clearCauses in the order of Metrics.resetsBy.
var clearCauses = [...]string{causeCleared, causeSourceReset, causeTombstone}

// The "to" labels of pdrouter_worker_health_transitions_total.
const (
	healthHealthy   = "healthy"
	healthUnhealthy = "unhealthy"
)

// States of pdrouter_workers.
const (
	workerReady       = "ready"
	workerUnhealthy   = "unhealthy"
	workerUnavailable = "unavailable"
	workerKVMissing   = "kv_events_missing"
)

type workerSeriesKey struct{ pool, state string }

// latencySampleResults are the "result" labels of
// pdrouter_statestore_latency_samples_total, in the order addStats adds
// applyStats' counts.
var latencySampleResults = [...]string{samplesSentIdx: "sent", "learned", "dropped", "thinned"}

// samplesSentIdx indexes "sent" in latencySampleResults.
const samplesSentIdx = 0

// workerSeries are the (pool, state) series of pdrouter_workers: only a
// decode worker can miss KV events (a prefill worker's cache is not read).
var workerSeries = [...]workerSeriesKey{
	{string(decider.PoolDecode), workerReady}, {string(decider.PoolDecode), workerUnavailable},
	{string(decider.PoolDecode), workerKVMissing}, {string(decider.PoolDecode), workerUnhealthy},
	{string(decider.PoolPrefill), workerReady}, {string(decider.PoolPrefill), workerUnavailable},
	{string(decider.PoolPrefill), workerUnhealthy},
}

// partitionKnown creates the series of a partition the materializer
// discovered, at next (the stored next offset, 0 when nothing was applied)
// and a lag of 0 until the next lag check.
func (m *Metrics) partitionKnown(t events.Topic, partition int32, next int64) {
	p := strconv.Itoa(int(partition))
	m.offset.WithLabelValues(string(t), p).Set(float64(next))
	m.lag.WithLabelValues(string(t), p)
}

// addStats moves the counters of apply rules into the metrics.
func (m *Metrics) addStats(s *applyStats) {
	m.removeUnknown.Add(float64(s.removeUnknown))
	m.storeUnknown.Add(float64(s.storeUnknown))
	m.orphans.Add(float64(s.orphans))
	m.resetsBy[0].Add(float64(s.cleared))
	m.resetsBy[1].Add(float64(s.resets))
	m.resetsBy[2].Add(float64(s.tombstones))
	m.staleLoads.Add(float64(s.staleLoads))
	m.afterTomb.Add(float64(s.afterTombstone))
	m.races.Add(float64(s.races))
	m.copies.Add(float64(s.decisionCopies))
	m.openCheckpoints.Add(float64(s.openCheckpoints))
	m.openReplayed.Add(float64(s.openReplayed))
	m.latency.droppedBy[latDropNoRowIdx].Add(float64(s.latNoRow))
	for i, n := range s.shareResults {
		if n > 0 {
			m.shareRecordsBy[i].Add(float64(n))
		}
	}
	m.replicaIDConflicts.Add(float64(s.replicaIDConflicts))
	for i, n := range [...]int64{s.samplesSent, s.samplesLearned, s.samplesDropped, s.samplesThinned} {
		m.latencySamples[i].Add(float64(n))
	}
	for _, t := range s.healthTransitions {
		to := healthUnhealthy
		if t.rec.GetHealthy() {
			to = healthHealthy
		}
		m.healthTransitions.WithLabelValues(to, events.HealthReasonLabel(t.rec.GetReason())).Inc()
	}
	*s = applyStats{healthTransitions: s.healthTransitions[:0]}
}

// observeState sets the gauges from the state (read lock held).
func (m *Metrics) observeState(st *state) {
	for t := Tier(0); t < numTiers; t++ {
		m.tierBlocks[t].Set(float64(st.tierBlocks[t]))
	}
	// Every (pool, state) is set, 0 included, so a series never vanishes
	// when the last worker of its kind leaves.
	var counts [len(workerSeries)]int
	for ref := range st.viewInfos {
		w := &st.viewInfos[ref]
		state := workerReady
		switch {
		case w.Unhealthy:
			state = workerUnhealthy
		case w.Unavailable:
			state = workerUnavailable
		case st.workers[st.viewSlots[ref]].kvMissing:
			state = workerKVMissing
		}
		if i := workerSeriesIndex(string(w.Pool), state); i >= 0 {
			counts[i]++
		}
	}
	for i, n := range counts {
		m.workerGauges[i].Set(float64(n))
	}
	unhealthy := 0
	for id, h := range st.health {
		if !h.rec.GetHealthy() && st.regs[id] != nil {
			unhealthy++
		}
	}
	m.unhealthy.Set(float64(unhealthy))
	m.active.Set(float64(st.act.active))
	m.kvMissing.Set(float64(st.kvMissing))
	m.bsMismatch.Set(float64(st.bsMismatch))
	m.predicted.Set(float64(st.predicted))
	m.chainBytes.Set(float64(8 * st.act.chainBlocks))
	if st.act.open != nil {
		m.openRequests.Set(float64(len(st.act.entries)))
	}
	m.latency.observe(st)
	m.observeRows(st)
	for tp, n := range st.offsets {
		m.observeOffset(tp, n)
	}
}

// observeRows sets the gauges of the load-share rows.
func (m *Metrics) observeRows(st *state) {
	if r := st.shares; r != nil {
		m.shareRowsHeld.Set(float64(len(r.rows)))
		m.shareCounting.Set(float64(r.counting))
	}
	if st.learnedSamples {
		// Peers' latency samples moved the model (sharesamples.go).
		m.latency.observe(st)
		st.learnedSamples = false
	}
}

// observeOffset sets the offset gauge of tp.
func (m *Metrics) observeOffset(tp topicPartition, n int64) {
	g := m.offsets[tp]
	if g == nil {
		g = m.offset.WithLabelValues(string(tp.topic), strconv.Itoa(int(tp.partition)))
		m.offsets[tp] = g
	}
	g.Set(float64(n))
}

// workerSeriesIndex is the index of (pool, state) in workerSeries, or -1.
func workerSeriesIndex(pool, state string) int {
	for i, k := range workerSeries {
		if k.pool == pool && k.state == state {
			return i
		}
	}
	return -1
}
