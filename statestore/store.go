package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/latmodel"
	"github.com/pdrouter/pdrouter/migrations"
)

// DefaultMaxWorkers is the default of Options.MaxWorkers: far above the
// fleets a router serves (hundreds of engines), far below what would strain
// a replica's memory (each worker costs a registry entry, a view row and
// per-rank tables).
const DefaultMaxWorkers = 4096

// StoreDirName is the Pebble store's directory under --data-dir.
const StoreDirName = "store"

// Options configure a Store. The zero value is usable.
type Options struct {
	// Names maps physical topic names to logical ones (the --topic-prefix).
	Names events.Names
	// Logger receives rebuild, apply and progress logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the store's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// DecodeMetrics counts decoded and invalid records. When nil, the store
	// creates its own on Registerer. Pass the process's one when several
	// components decode on the same registry.
	DecodeMetrics *events.DecodeMetrics

	// ActiveExpiry ends an active request this long (event time) after its
	// last event; default 300 s (--router-active-request-expiry).
	ActiveExpiry time.Duration
	// ActiveRetention is how long after its event time a decision or
	// outcome fact is kept; at least ActiveExpiry; default 2×ActiveExpiry.
	ActiveRetention time.Duration
	// MaxClockSkew is the extra time outcome facts are kept, so that an
	// outcome stamped before its decision (another clock) cannot vanish
	// first; default 60 s.
	MaxClockSkew time.Duration
	// LoadMaxAge hides load samples older than this (event time) from the
	// decider; 0 keeps the latest sample forever.
	LoadMaxAge time.Duration

	// DecisionRetention is how long after its event time (decided_at) a
	// decision record stays readable by Decision and DecisionForRequest and
	// stored in Pebble; default 24 h. Swept against the decisions clock, so
	// every replica keeps the same records. In approximate mode it is at
	// least ApproximateTTL, because predictions are rebuilt from the
	// records.
	DecisionRetention time.Duration
	// DecisionCacheSize is how many decoded decision records are kept in
	// memory for lookups, beyond the ones Pebble serves; default 1024.
	DecisionCacheSize int
	// MaxLocalDecisions bounds this replica's own decisions held in memory
	// until they are read back from the log; default 8192. Beyond it the
	// oldest are dropped from lookups (they reappear when read back).
	MaxLocalDecisions int

	// Approximate records every decision's hash chain as predicted device
	// cache entries on its decode worker, for engines that publish no KV
	// events (like the reference system's --no-router-kv-events). KV events, if any arrive, still apply.
	Approximate bool
	// ApproximateTTL is how long (event time, after decided_at) a predicted
	// entry lasts; default 120 s.
	ApproximateTTL time.Duration
	// KvEventsMissingAfter is how long a decode worker may send load samples
	// without a KV event before it is reported as "KV events missing"
	// (conditional-disagg.md, requirements); default 60 s.
	KvEventsMissingAfter time.Duration

	// Cell is the share of the log this store holds (events/cell.go): the
	// materializer consumes the cell's partitions only, and Open refuses a
	// store that holds offsets of another cell's partitions, since its
	// state is not the cell's. The zero value is the whole log. The cell
	// is not stored: the state of a cell is the state of its partitions,
	// which the stored offsets name, so a cell's store and a store rebuilt
	// from the same partitions (explain's) are the same bytes.
	Cell events.Cell

	// Source is what the store learns decisions and lifecycle events from:
	// the decisions and outcomes topics (the zero value) or the load-deltas
	// topic (loaddelta.go). Apply ignores the records of the topics the
	// source does not read. Like the cell, the source is not stored: the
	// offsets name the topics applied, and Open refuses a store that has
	// applied a topic of the other source (ErrWrongSource). Every replica
	// of a group must use the same source, or their states differ.
	Source Source
	// PeerSums: with SourceLoadDeltas, the log's requests are held in
	// memory as open requests, ended in their partition's order, and
	// reach Pebble only in checkpoints (open.go, opencheckpoint.go),
	// instead of as facts written per request (active.go); lookups of
	// the log's decisions are served from them, for as long as they are
	// held, instead of from a request index in Pebble (openindex.go).
	// Every replica
	// of a group must use the same value; a store built with the other is
	// refused with ErrWrongSource (or rebuilt, RebuildOtherSource).
	PeerSums bool
	// IdempotencyWindow: with PeerSums, how long after decided_at an open
	// request is held at least, ended or not, and so how long its decision
	// is found by request id (idempotent retries, lifecycle events) and by
	// decision id (openindex.go). Default and minimum 30 s
	// (decider.RecentLocalWindow, which holds every request that long for
	// its workers' recent counts). Longer costs memory (~0.7 KB of heap a
	// decision held) and a checkpoint write and deletion per decision held
	// past a minute. Every replica of a group must use the same value: it
	// shapes the state they compare.
	IdempotencyWindow time.Duration

	// RebuildOtherSource: Open wipes a store of the other Source and
	// rebuilds it by replay instead of refusing it with ErrWrongSource (a
	// replica switching --load-deltas modes, or upgraded to a new default).
	RebuildOtherSource bool

	// ReplicaID: with SourceLoadShares, the replica's writer id
	// (--replica-id), required. The store applies the load deltas this
	// writer wrote (its partition, events.WriterPartition, and records
	// whose writer_id is this id), keeps its peers' load as the rows of
	// their snapshots and never counts its own rows (sharerows.go). It is
	// stored: a store built for another id holds another replica's
	// requests, and is refused with ErrWrongSource.
	ReplicaID string
	// SharesEpoch: with SourceLoadShares, the first snapshot TakeShares
	// returns has seq SharesEpoch+1. serve passes the wall clock (ns) at
	// start, so a restarted writer's seqs exceed the ones it wrote before;
	// the store itself never reads the clock.
	SharesEpoch uint64
	// LatencySamplesPerSecond: with SourceLoadShares, how many latency
	// samples of its ended requests a writer sends its peers a second of
	// its requests' event time, at most (sharesamples.go); a burst of one
	// second's worth is let through. 0: DefaultLatencySamplesPerSecond;
	// negative: none.
	LatencySamplesPerSecond int

	// MaxWorkers caps the registered worker ids (--max-workers); default
	// DefaultMaxWorkers. A registration of a new id beyond it is skipped
	// on apply and counted (too_many_workers). The cap shapes the state, so
	// every replica of a log must run with the same value, or their states
	// (and digests) differ.
	MaxWorkers int

	// LatencyModel shapes the online latency model (window, skew, bound on join
	// entries; zero fields take latmodel's defaults). Like MaxWorkers it shapes
	// the state: every replica of a log must run with the same values.
	LatencyModel latmodel.Config

	// MemTableSize and CacheSize tune Pebble; defaults 16 MiB and 64 MiB.
	// The memtable is small on purpose: prefix keys end in engine block
	// hashes, which are random, so every insert searches the memtable's
	// skiplist down to a cold node, and a smaller skiplist is a shorter and
	// warmer search. Measured with storebench (2M block ops, 128 workers),
	// writes in arrival order: 4 MiB 690k ops/s, 16 MiB 600k, 64 MiB 490k,
	// 128 MiB 457k; and a 10M-op replay took 17.5 s at 16 MiB against
	// 22.2 s at 64 MiB. With the prefix writes sorted (prefixwrites.go),
	// CPU profiles of the same 2M ops: memtable inserts 0.7 s at 16 MiB
	// and 1.5 s at 64 MiB, flushes and compactions 2.1-2.7 s against
	// 1.6-1.8 s; about even, so 16 MiB stays.
	MemTableSize uint64
	CacheSize    int64
	// ChunkRecords bounds how many records are applied under one hold of
	// the write lock, so that the hot path never waits behind a whole
	// catch-up batch; default 256.
	ChunkRecords int

	// Records reads decision records back from the decisions topic by
	// position (events/logread.Reader). The store uses it at Open only, to
	// read back the hash chains of the requests in flight, which are not
	// stored (chains.go). Nil: those chains are lost (their blocks count
	// without their hashes until the requests end).
	Records RecordReader

	// FS holds the store's files; nil is the disk. Tests that open and
	// reopen many small stores (FuzzApply) give an in-memory one
	// (vfs.NewMem()) so each costs no disk I/O. Snapshots need the disk.
	FS vfs.FS
}

func (o *Options) defaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.ActiveExpiry <= 0 {
		o.ActiveExpiry = 300 * time.Second
	}
	if o.ActiveRetention < o.ActiveExpiry {
		if o.ActiveRetention != 0 {
			o.ActiveRetention = o.ActiveExpiry
		} else {
			o.ActiveRetention = 2 * o.ActiveExpiry
		}
	}
	if o.MaxClockSkew <= 0 {
		o.MaxClockSkew = 60 * time.Second
	}
	if o.DecisionRetention <= 0 {
		o.DecisionRetention = 24 * time.Hour
	}
	if o.DecisionCacheSize <= 0 {
		o.DecisionCacheSize = 1024
	}
	if o.MaxLocalDecisions <= 0 {
		o.MaxLocalDecisions = 8192
	}
	if o.ApproximateTTL <= 0 {
		o.ApproximateTTL = 120 * time.Second
	}
	if o.Approximate && o.DecisionRetention < o.ApproximateTTL {
		// Predictions are derived from the stored records at Open.
		o.DecisionRetention = o.ApproximateTTL
	}
	if o.KvEventsMissingAfter <= 0 {
		o.KvEventsMissingAfter = 60 * time.Second
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = 16 << 20
	}
	if o.CacheSize == 0 {
		o.CacheSize = 64 << 20
	}
	if o.MaxWorkers <= 0 {
		o.MaxWorkers = DefaultMaxWorkers
	}
	if o.ChunkRecords <= 0 {
		o.ChunkRecords = 256
	}
}

// Store is one replica's materialized state: Pebble on disk, the hot index
// in memory. Apply is called by one goroutine (the materializer); Read and
// the other methods are safe from any goroutine.
type Store struct {
	dir  string
	opts Options
	log  *slog.Logger
	// conflicts and conflictLogged space the log of replica id conflicts
	// (logReplicaIDConflicts); under mu.
	conflicts      int64
	conflictLogged time.Time
	db             *pebble.DB
	met            *Metrics

	mu sync.RWMutex // guards st and applied
	st *state
	// applied is closed and replaced each time readers see a new chunk of
	// applied records: WaitApplied's notification (wait.go).
	applied chan struct{}

	// dbMu guards db against Close for the readers that go to Pebble
	// outside mu (decision lookups). Lock order: mu, then dbMu.
	dbMu sync.RWMutex
	// cache holds recently used decision records (decisions.go).
	cache *decisionCache
	// own: the positions of this replica's recent decisions, with source
	// load-deltas (local.go).
	own ownPositions
	// expecting holds this replica's decisions from their encoding to
	// RecordLocalDecisionAt (local.go ExpectLocalDecision).
	expecting expectedDecisions
	// closeFS stops the disk health check of the Pebble FS (pebbleOptions).
	closeFS io.Closer

	// commitMu serializes Pebble commits with checkpoints, so a checkpoint
	// always holds whole batches and knows their offsets.
	commitMu  sync.Mutex
	committed Offsets
	broken    error
	// commits counts the batches whose decisions moved from pending to
	// Pebble (local.go reads it without mu).
	commits atomic.Uint64
	// uncommitted: memory holds records applied since the last commit
	// (Apply's chunks are visible before their batch commits). Under mu.
	uncommitted bool
	// writerPartition: with SourceLoadShares, the load-deltas partition
	// the materializer reads (its writer's), -1 until it has found it.
	writerPartition atomic.Int64
}

// ErrRebuildNeeded is matched by errors that can only be cured by wiping
// the store and replaying (or bootstrapping from a snapshot).
var ErrRebuildNeeded = errors.New("statestore: rebuild needed")

// Open opens or creates the store in dir (the Pebble directory itself,
// usually <data-dir>/store). The schema version recorded in the store
// decides, through migrations.StoreRule, whether it is opened, upgraded or
// wiped for a rebuild by replay.
func Open(dir string, o Options) (*Store, error) {
	o.defaults()
	if o.Source == SourceLoadShares && (o.ReplicaID == "" || len(o.ReplicaID) > events.MaxNameLen) {
		return nil, fmt.Errorf("statestore: a store of source %s needs Options.ReplicaID (the writer id, 1-%d bytes)", o.Source, events.MaxNameLen)
	}
	s := &Store{dir: dir, opts: o, log: o.Logger, applied: make(chan struct{}), cache: newDecisionCache(o.DecisionCacheSize),
		expecting: expectedDecisions{m: map[string]expectedDecision{}}}
	s.writerPartition.Store(-1)
	s.met = newMetrics(o.Registerer, o.DecodeMetrics)
	s.met.cell.Set(float64(o.Cell.Index))
	s.met.cells.Set(float64(max(o.Cell.Count, 1)))
	if o.Source == SourceLoadShares && o.Registerer != nil {
		o.Registerer.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pdrouter_statestore_share_unsent_workers",
			Help: "Shares this replica changed that the log has not acknowledged in a snapshot yet (--load-deltas snapshots): workers waiting for the next group commit, and the shares of the snapshots in flight (a worker changed again while its snapshot is in flight counts twice). Peers count this replica's latest share of every worker once it is 0 and they have read the log's end.",
		}, s.unsentShares))
	}
	if o.Source == SourceLoadShares {
		// Its refusals exist at 0 from the start: the records the decoder
		// refuses, and the other writers' deltas on its partition.
		for _, r := range events.LoadSharesReasons {
			s.met.decode.Invalid.WithLabelValues(string(events.TopicLoadShares), r)
		}
		s.met.decode.Invalid.WithLabelValues(string(events.TopicLoadDeltas), reasonOtherWriter)
	}
	err := s.open(dir)
	if errors.Is(err, ErrWrongSource) && o.RebuildOtherSource {
		// The store is derived from the log: a store of the other source
		// is wiped and replayed, as a store of an old schema is.
		s.log.Warn("statestore: the store was built from the other source of decisions; rebuilding it by replay", "dir", dir, "source", o.Source.String(), "err", err)
		s.db = nil
		if s.closeFS != nil {
			_ = s.closeFS.Close()
		}
		if err := o.FS.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("statestore: wipe %s for rebuild: %w", dir, err)
		}
		err = s.open(dir)
	}
	if err != nil {
		return nil, err
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(newPebbleCollector(s))
	}
	return s, nil
}

// open opens Pebble in dir and loads the state, or returns an error with
// everything it opened closed.
func (s *Store) open(dir string) error {
	o := s.opts
	start := time.Now()
	found, exists, err := readSchema(o.FS, dir)
	if err != nil {
		return err
	}
	action, why := migrations.StoreRule(found, exists)
	s.log.Info("statestore: open", "dir", dir, "action", action.String(), "reason", why)
	if action == migrations.StoreRebuild {
		if err := o.FS.RemoveAll(dir); err != nil {
			return fmt.Errorf("statestore: wipe %s for rebuild: %w", dir, err)
		}
	}
	popts := s.pebbleOptions()
	db, err := pebble.Open(dir, popts)
	popts.Cache.Unref() // the DB holds its own reference
	if err != nil {
		_ = s.closeFS.Close()
	}
	if err != nil {
		return fmt.Errorf("statestore: open pebble at %s: %w", dir, err)
	}
	s.db = db
	if action == migrations.StoreUpgrade {
		if err := migrations.UpgradeStore(db, found); err != nil {
			db.Close()
			return err
		}
	}
	if action != migrations.StoreOpen {
		v := binary.LittleEndian.AppendUint32(nil, migrations.StoreSchemaVersion)
		if err := db.Set(keySchema, v, pebble.NoSync); err != nil {
			db.Close()
			return err
		}
		if err := db.Flush(); err != nil {
			db.Close()
			return err
		}
	}
	st, err := s.rebuild()
	if err != nil {
		db.Close()
		return fmt.Errorf("statestore: load %s: %w (delete the directory to rebuild by replay)", dir, err)
	}
	st.storedAt = s.storedDecisionAt
	s.st = st
	s.committed = st.committedOffsets()
	if err := checkCellOffsets(o.Cell, s.committed); err != nil {
		db.Close()
		return fmt.Errorf("statestore: %s: %w", dir, err)
	}
	if err := checkSourceOffsets(o.Source, s.committed); err != nil {
		db.Close()
		return fmt.Errorf("statestore: %s: %w", dir, err)
	}
	if err := s.checkWriterMarker(); err != nil {
		db.Close()
		return fmt.Errorf("statestore: %s: %w", dir, err)
	}
	s.checkSlotFlags(true)
	s.met.observeState(st)
	s.log.Info("statestore: ready", "dir", dir, "workers", len(st.workers), "blocks", st.tierBlocks[TierDevice]+st.tierBlocks[TierHost]+st.tierBlocks[TierDisk],
		"active_requests", st.act.active, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// ErrWrongCell is matched by the error of opening a store that holds
// partitions outside the cell it is opened for.
var ErrWrongCell = errors.New("the store holds another cell's partitions")

// checkCellOffsets refuses offsets of partitions outside c.
func checkCellOffsets(c events.Cell, offs Offsets) error {
	for _, o := range offs {
		if !c.OwnsPartition(o.Partition) {
			return fmt.Errorf("%w: it has applied %s/%d, which cell %s does not own; it was built for another cell or the whole log: delete it to rebuild the cell by replay",
				ErrWrongCell, o.Topic, o.Partition, c)
		}
	}
	return nil
}

// ErrWrongSource is matched by the error of opening a store that has
// applied topics of the other Source.
var ErrWrongSource = errors.New("the store was built from the other source of decisions")

// checkSourceOffsets refuses offsets of topics src does not apply.
func checkSourceOffsets(src Source, offs Offsets) error {
	for _, o := range offs {
		if !src.Applies(o.Topic) {
			return fmt.Errorf("%w: it has applied %s/%d, which a store of source %s does not read; it was built with the other --load-deltas mode: delete it to rebuild by replay",
				ErrWrongSource, o.Topic, o.Partition, src)
		}
	}
	return nil
}

// checkWriterMarker refuses a store of SourceLoadShares built for another
// ReplicaID, or of another source, and marks a new one: such a store holds
// one writer's own requests, which no other writer's store holds, and its
// load-deltas offsets are of that writer's partition only, so a store of
// another source or writer is not this one behind (ErrWrongSource, which
// RebuildOtherSource cures by replay).
func (s *Store) checkWriterMarker() error {
	v, closer, err := s.db.Get(keySharesWriter)
	found := err == nil
	var writer string
	if found {
		writer = string(v)
		closer.Close()
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	switch {
	case s.opts.Source != SourceLoadShares && found:
		return fmt.Errorf("%w: it holds writer %q's requests and its peers' load shares; a store of source %s does not: delete it to rebuild by replay", ErrWrongSource, writer, s.opts.Source)
	case s.opts.Source != SourceLoadShares:
		return nil
	case found && writer != s.opts.ReplicaID:
		return fmt.Errorf("%w: it holds writer %q's requests, not %q's: delete it to rebuild by replay", ErrWrongSource, writer, s.opts.ReplicaID)
	case found:
		return nil
	case len(s.committed) > 0:
		return fmt.Errorf("%w: it was built by a store of another source (it has applied %s) and holds no writer's own requests: delete it to rebuild by replay", ErrWrongSource, s.committed)
	}
	if err := s.db.Set(keySharesWriter, []byte(s.opts.ReplicaID), pebble.NoSync); err != nil {
		return err
	}
	return s.db.Flush()
}

// Source is what the store learns decisions and lifecycle events from.
func (s *Store) Source() Source { return s.opts.Source }

// Cell is the share of the log the store holds.
func (s *Store) Cell() events.Cell { return s.opts.Cell }

// pebbleOptions: the WAL is off because Kafka is the log. A crash loses
// the memtable, and with it only whole batches (each batch, offsets
// included, is applied to one memtable atomically and memtables flush
// whole), so the store resumes from older but consistent offsets. Commits
// therefore use NoSync (Sync fails without a WAL); Close flushes first.
func (s *Store) pebbleOptions() *pebble.Options {
	o := &pebble.Options{
		FormatMajorVersion:          migrations.PebbleFormat,
		DisableWAL:                  true,
		MemTableSize:                s.opts.MemTableSize,
		MemTableStopWritesThreshold: 4,
		L0StopWritesThreshold:       100,
		Logger:                      quietLogger{s.log},
		// Idempotency lookups (every request that names its id, every
		// lifecycle event) seek the request index at every level; with
		// Pebble's 8 MiB default their blocks were read and decompressed
		// again on most seeks.
		Cache: pebble.NewCache(s.opts.CacheSize),
	}
	// Pebble's disk health check, set up here rather than by
	// EnsureDefaults: its monitor goroutine then reports slow operations
	// to the store's log and metric only, and never reads the Options
	// (whose default callback it would otherwise call). Closed with the
	// store.
	var fs vfs.FS
	fs, s.closeFS = vfs.WithDiskHealthChecks(s.opts.FS, diskSlowAfter, nil, func(info vfs.DiskSlowInfo) {
		s.met.diskSlow.Inc()
		s.log.Warn("statestore: slow disk operation", "op", info.OpType.String(), "path", info.Path, "bytes", info.WriteSize, "running_for", info.Duration)
	})
	o.FS = fs
	o.CompactionConcurrencyRange = func() (int, int) { return 1, 2 }
	// Large values (decision headers with their watermarks, and in
	// approximate mode their hash chains: KBs, mostly random numbers) go to blob files, written
	// once, so compactions move references instead of rewriting them; and
	// blocks are compressed with the fastest codec, kept uncompressed when
	// that does not pay (hash chains never compress). Neither changes the
	// keyspace or the digest.
	o.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionFastest })
	o.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{Enabled: true, MinimumSize: 1024, MaxBlobReferenceDepth: 10,
			RewriteMinimumAge: 5 * time.Minute, TargetGarbageRatio: 0.3}
	}
	o.EnsureDefaults()
	return o
}

// diskSlowAfter is when a Pebble file operation counts as slow (Pebble's
// own default).
const diskSlowAfter = 5 * time.Second

// readSchema reads the version key of an existing store without keeping
// it open. exists is false when there is no store in dir.
func readSchema(fs vfs.FS, dir string) (uint32, bool, error) {
	v, exists, err := readKey(fs, dir, keySchema)
	if err != nil || !exists || len(v) != 4 {
		return 0, exists, err
	}
	return binary.LittleEndian.Uint32(v), true, nil
}

// readKey reads one key of an existing store without keeping it open.
// exists is false when there is no store in dir; v is nil when the key is
// absent or the directory is something Pebble cannot open (not a store,
// another format, corrupt: rebuilt over).
func readKey(fs vfs.FS, dir string, key []byte) (v []byte, exists bool, err error) {
	entries, err := fs.List(dir)
	if os.IsNotExist(err) || (err == nil && len(entries) == 0) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, ErrorIfNotExists: true, FormatMajorVersion: migrations.PebbleFormat, Logger: quietLogger{nil}, FS: fs})
	if err != nil {
		return nil, true, nil
	}
	defer db.Close()
	val, closer, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer closer.Close()
	return bytes.Clone(val), true, nil
}

// WriterOf returns the writer a store of SourceLoadShares in dir was built
// for (Options.ReplicaID), and false for a store of another source or no
// store: tools that open a stopped replica's store learn from it how to
// open it. The store must not be open.
func WriterOf(dir string) (string, bool, error) {
	v, _, err := readKey(vfs.Default, dir, keySharesWriter)
	return string(v), v != nil, err
}

func (s *Store) activeConfig() activeConfig {
	c := activeConfig{
		expiry:    int64(s.opts.ActiveExpiry),
		retention: int64(s.opts.ActiveRetention),
		skew:      int64(s.opts.MaxClockSkew),

		decisionRetention: int64(s.opts.DecisionRetention),
		maxLocal:          s.opts.MaxLocalDecisions,
		kvMissingAfter:    int64(s.opts.KvEventsMissingAfter),
		maxWorkers:        s.opts.MaxWorkers,
		latency:           s.opts.LatencyModel,
		open:              s.opts.PeerSums && s.opts.Source != SourceDecisions,
		openHold:          max(recentWindow, int64(s.opts.IdempotencyWindow)),
	}
	if s.opts.Source == SourceLoadShares {
		c.replica, c.sharesEpoch = s.opts.ReplicaID, s.opts.SharesEpoch
		c.samplesPerSecond = s.opts.LatencySamplesPerSecond
		if c.samplesPerSecond == 0 {
			c.samplesPerSecond = DefaultLatencySamplesPerSecond
		}
	}
	if s.opts.Approximate {
		c.approxTTL = int64(s.opts.ApproximateTTL)
	}
	return c
}

// Close flushes the memtable (required with the WAL off) and closes.
func (s *Store) Close() error {
	cerr := s.checkpointOpen()
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.db == nil {
		return nil
	}
	s.dbMu.Lock()
	defer s.dbMu.Unlock()
	ferr := s.db.Flush()
	err := s.db.Close()
	s.db = nil
	return errors.Join(cerr, ferr, err, s.closeFS.Close())
}

// Dir is the Pebble directory.
func (s *Store) Dir() string { return s.dir }

// quietLogger routes Pebble's logs to slog at debug level (errors at
// error), so a compaction does not print to stderr.
type quietLogger struct{ l *slog.Logger }

func (q quietLogger) Infof(format string, args ...any) {
	if q.l != nil {
		q.l.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (q quietLogger) Errorf(format string, args ...any) {
	if q.l != nil {
		q.l.Error("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (q quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
