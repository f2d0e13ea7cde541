package replay

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/logread"
	"github.com/pdrouter/pdrouter/migrations"
	"github.com/pdrouter/pdrouter/statestore"
)

// RebuildInfo says how the state at a watermark was rebuilt.
type RebuildInfo struct {
	// Snapshot is the snapshot directory the rebuild started from, "" when
	// it replayed from the start of the log.
	Snapshot        string                      `json:"snapshot,omitempty"`
	SnapshotOffsets map[string]map[string]int64 `json:"snapshot_offsets,omitempty"`
	// SnapshotsSkipped names snapshots that were not usable, and why.
	SnapshotsSkipped []string `json:"snapshots_skipped,omitempty"`
	// Replayed is the number of log records applied after the snapshot.
	Replayed int64 `json:"replayed"`
	// Reached is the offset vector the rebuilt state reflects; it equals
	// the watermark unless history is missing.
	Reached map[string]map[string]int64 `json:"reached"`
	// HistoryGone lists partitions whose records below the watermark are
	// no longer in the log and were not covered by a snapshot.
	HistoryGone []string `json:"history_gone,omitempty"`
	TookMillis  int64    `json:"took_ms"`
}

// rebuilt is a store rebuilt at a watermark, in a temporary directory that
// Close removes.
type rebuilt struct {
	dir   string
	opts  statestore.Options
	store *statestore.Store
	info  RebuildInfo
	// records reads the chains of the requests in flight back from the
	// decisions topic each time the store opens (statestore/chains.go).
	records *kgo.Client
}

func (r *rebuilt) Close() {
	if r.store != nil {
		_ = r.store.Close()
		r.store = nil
	}
	if r.records != nil {
		r.records.Close()
		r.records = nil
	}
	_ = os.RemoveAll(r.dir)
}

// reopen closes the store and opens it again from Pebble. Opening derives
// all memory from Pebble (statestore invariant 3), so this drops whatever
// RecordLocalDecision added and gives back the state at the watermark: the
// way to try another set of in-flight decisions on the same rebuild.
func (r *rebuilt) reopen() error {
	if r.store != nil {
		if err := r.store.Close(); err != nil {
			return err
		}
	}
	o := r.opts
	o.Registerer = prometheus.NewRegistry() // a store registers its metrics once per registry
	s, err := statestore.Open(filepath.Join(r.dir, "store"), o)
	r.store = s
	return err
}

// decide runs the decider on the rebuilt state.
func (r *rebuilt) decide(dc *decider.Decider, req *decider.Request) (*decider.Decision, error) {
	d := new(decider.Decision)
	var err error
	r.store.Read(func(v statestore.View) { err = dc.DecideInto(d, v, req) })
	return d, err
}

// storeOptions are the statestore options the deciding replica ran with,
// as far as the record's config tells them (active expiry, approximate
// mode); the rest are the defaults, as on a replica started with defaults.
func storeOptions(names events.Names, cfg decider.Config) statestore.Options {
	return statestore.Options{
		Names:        names,
		Logger:       slog.New(slog.DiscardHandler),
		Registerer:   prometheus.NewRegistry(),
		ActiveExpiry: cfg.ActiveRequestExpiry,
		Approximate:  cfg.Approximate(),
		MemTableSize: 8 << 20,
		CacheSize:    8 << 20,
	}
}

// target is a watermark as offsets per partition.
type target map[events.Topic]map[int32]int64

func targetOf(w *pb.Watermark) target {
	t := target{}
	for _, tp := range w.GetTopics() {
		topic := events.Topic(tp.GetTopic())
		if t[topic] == nil {
			t[topic] = map[int32]int64{}
		}
		for _, p := range tp.GetPartitions() {
			t[topic][p.GetPartition()] = p.GetOffset()
		}
	}
	return t
}

func (t target) get(topic events.Topic, p int32) int64 { return t[topic][p] }

func offsetsMap(o statestore.Offsets) map[string]map[string]int64 {
	return WatermarkMap(o.Proto())
}

// rebuildAt builds, in a new temporary directory under tmpRoot, a store
// holding exactly the log up to the watermark: from the newest usable
// snapshot under snapDir when there is one, then by applying each
// partition's records up to the watermark's offset, as a replica's
// materializer does.
func rebuildAt(ctx context.Context, conn []kgo.Opt, opts statestore.Options, w *pb.Watermark, snapDir, tmpRoot string, log *slog.Logger) (*rebuilt, error) {
	start := time.Now()
	if tmpRoot != "" {
		if err := os.MkdirAll(tmpRoot, 0o755); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp(tmpRoot, "pdrouter-explain-")
	if err != nil {
		return nil, err
	}
	rc, err := kgo.NewClient(conn...)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	opts.Records = logread.New(rc)
	r := &rebuilt{dir: dir, opts: opts, records: rc}
	ok := false
	defer func() {
		if !ok {
			r.Close()
		}
	}()
	want := targetOf(w)
	// A replica of --load-deltas apply named load-deltas, not decisions and
	// outcomes, in its watermark: the state is rebuilt from the same
	// source.
	if _, ok := want[events.TopicLoadDeltas]; ok {
		opts.Source = statestore.SourceLoadDeltas
	}
	// A replica of --load-deltas snapshots named load-shares, and of
	// load-deltas only its own partition: the store is rebuilt as that
	// writer's (opts.ReplicaID, the decision's replica), its own requests
	// from its partition and its peers' load as rows.
	if _, ok := want[events.TopicLoadShares]; ok && opts.ReplicaID != "" {
		opts.Source = statestore.SourceLoadShares
	}
	r.opts.Source = opts.Source
	snap, skipped := pickSnapshot(snapDir, want)
	r.info.SnapshotsSkipped = skipped
	storeDir := filepath.Join(dir, "store")
	if snap != "" {
		r.store, err = openSnapshotCopy(snap, storeDir, opts)
		if err != nil {
			r.info.SnapshotsSkipped = append(r.info.SnapshotsSkipped, fmt.Sprintf("%s: %v", snap, err))
			_ = os.RemoveAll(storeDir)
			snap = ""
		}
	}
	if snap == "" {
		if r.store, err = statestore.Open(storeDir, opts); err != nil {
			return nil, err
		}
	} else {
		r.info.Snapshot = snap
		r.info.SnapshotOffsets = offsetsMap(r.store.Offsets())
	}

	cl, err := kgo.NewClient(conn...)
	if err != nil {
		return nil, err
	}
	bounds, err := listBounds(ctx, kadm.NewClient(cl), opts.Names, watermarkTopics(want)...)
	cl.Close()
	if err != nil {
		return nil, err
	}
	have := r.store.Offsets()
	var spans []span
	var total int64
	for _, t := range events.AllTopics {
		for p, to := range want[t] {
			from, _ := have.Get(t, p)
			if from >= to {
				continue
			}
			b, known := bounds[t][p]
			if !known {
				r.info.HistoryGone = append(r.info.HistoryGone, fmt.Sprintf("%s/%d: the partition no longer exists", t, p))
				continue
			}
			if b[0] > from {
				r.info.HistoryGone = append(r.info.HistoryGone, fmt.Sprintf("%s/%d: offsets %d..%d are gone (log starts at %d)", t, p, from, min(b[0], to)-1, b[0]))
				from = b[0]
			}
			if b[1] < to {
				r.info.HistoryGone = append(r.info.HistoryGone, fmt.Sprintf("%s/%d: the log ends at %d, before the watermark's %d (topic recreated?)", t, p, b[1], to))
				to = b[1]
			}
			if from < to {
				spans = append(spans, span{Topic: t, Partition: p, From: from, To: to})
				total += to - from
			}
		}
	}
	slices.Sort(r.info.HistoryGone)
	prog := NewProgress(log, "rebuild state at the watermark", total, 0)
	err = scanSpans(ctx, conn, opts.Names, spans, nil, func(recs []*kgo.Record) error {
		prog.Add(len(recs))
		r.info.Replayed += int64(len(recs))
		return r.store.Apply(recs)
	})
	prog.Done()
	if err != nil {
		return nil, err
	}
	r.info.Reached = offsetsMap(r.store.Offsets())
	r.info.TookMillis = time.Since(start).Milliseconds()
	ok = true
	return r, nil
}

// pickSnapshot returns the newest snapshot under dir (each a directory with
// a manifest.json, as statestore.Checkpoint writes them) that lies at or
// before the watermark in every partition, so that replaying forward from it
// reaches exactly the watermark. It says why each other one was skipped.
func pickSnapshot(dir string, want target) (string, []string) {
	if dir == "" {
		return "", nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", nil
	}
	var best string
	var bestTotal int64 = -1
	var skipped []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		man, err := statestore.ReadSnapshotManifest(p)
		if err != nil {
			continue // not a snapshot (a partial download, say)
		}
		if man.SchemaVersion != migrations.StoreSchemaVersion {
			skipped = append(skipped, fmt.Sprintf("%s: store schema v%d, this build reads v%d", p, man.SchemaVersion, migrations.StoreSchemaVersion))
			continue
		}
		var total int64
		after := ""
		for _, o := range man.Offsets {
			if o.Next > want.get(o.Topic, o.Partition) {
				after = fmt.Sprintf("%s/%d at %d is past the watermark's %d", o.Topic, o.Partition, o.Next, want.get(o.Topic, o.Partition))
				break
			}
			total += o.Next
		}
		if after != "" {
			skipped = append(skipped, fmt.Sprintf("%s: after the watermark (%s)", p, after))
			continue
		}
		if total > bestTotal || (total == bestTotal && p < best) {
			best, bestTotal = p, total
		}
	}
	return best, skipped
}

// openSnapshotCopy opens a store from a snapshot without changing the
// snapshot: statestore.OpenFromSnapshot hard-links only the immutable table
// files and copies the rest, and explain must never change what it reads.
func openSnapshotCopy(snap, storeDir string, opts statestore.Options) (*statestore.Store, error) {
	man, err := statestore.ReadSnapshotManifest(snap)
	if err != nil {
		return nil, err
	}
	s, err := statestore.OpenFromSnapshot(snap, storeDir, opts)
	if err != nil {
		return nil, err
	}
	if got := s.Offsets(); !slices.Equal(got, man.Offsets) {
		_ = s.Close()
		return nil, fmt.Errorf("opened at %s, not at the manifest's %s", got, man.Offsets)
	}
	return s, nil
}

// watermarkTopics are the topics want names, in events.AllTopics order:
// those whose bounds a rebuild reads. A topic no store applies (forwards)
// is in no watermark, and a deployment that never created it still
// explains its decisions.
func watermarkTopics(want target) []events.Topic {
	var out []events.Topic
	for _, t := range events.AllTopics {
		if len(want[t]) > 0 {
			out = append(out, t)
		}
	}
	return out
}
