// Package storebench measures the statestore against its bars:
// apply rate into Pebble and the index, overlap-query latency, hot-index
// bytes per cached entry, bootstrap from a snapshot, replay time, and the
// end-to-end apply rate from a broker. `pdrouter bench store` prints its
// table; the Go benchmarks in storebench_test.go run the same workloads.
package storebench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/benchtable"
	"github.com/pdrouter/pdrouter/kvhash"
	"github.com/pdrouter/pdrouter/migrations"
	"github.com/pdrouter/pdrouter/statestore"
)

// Config sizes a run. Zero fields take the bars' defaults, scaled so
// that the whole run takes about a minute on a 2-core machine.
type Config struct {
	Workers   int // 128
	BlockSize int // 16 tokens
	// Entries is the number of cached (block, worker) entries of the query,
	// memory and bootstrap measurements; default 1,000,000.
	Entries int
	// ChainBlocks is the request length of the overlap query; default 1000.
	ChainBlocks int
	Queries     int // 20,000
	// ApplyBlockOps is the size of the apply-rate run; default 2,000,000.
	ApplyBlockOps int
	// ReplayBlockOps is the size of the replay run; default 2,000,000
	// (the bar's full size is 10M: pass it, it takes ~5× longer).
	ReplayBlockOps int
	// E2EBlockOps is the size of the end-to-end run through a broker;
	// default 500,000. Brokers empty: an in-process kfake (labelled so).
	E2EBlockOps int
	Brokers     []string
	ClientOpts  []kgo.Opt
	// Dir holds the stores; default a temporary directory, removed after.
	Dir string
	Log *slog.Logger
}

func (c *Config) defaults() {
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&c.Workers, 128)
	def(&c.BlockSize, 16)
	def(&c.Entries, 1_000_000)
	def(&c.ChainBlocks, 1000)
	def(&c.Queries, 20_000)
	def(&c.ApplyBlockOps, 2_000_000)
	def(&c.ReplayBlockOps, 2_000_000)
	def(&c.E2EBlockOps, 500_000)
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Result is one row of the table.
type Result = benchtable.Row

// Workload builds the kv-events records of a fleet: each worker stores
// conversations that start with one of a few shared system prompts
// (held by many workers, as in a real fleet) and continue with content of
// its own; records carry 16 blocks each, as a chain (parent = the previous
// block), so the parent lookup and chained hashing are exercised.
type Workload struct {
	Names     events.Names
	Workers   int
	BlockSize int
	rng       *rand.Rand
	ws        []*wstate
	offsets   map[int32]int64
	clock     int64
	// Conversations keeps, per worker, the token "texts" of stored chains,
	// so queries can ask for a prompt that really is cached.
	Conversations [][]conversation
}

type conversation struct {
	system, length int
	id             uint32
}

type wstate struct {
	next     uint64 // next engine hash
	convo    conversation
	pos      int    // blocks of convo stored so far
	lastEng  uint64 // engine hash of the last stored block
	held     []uint64
	heldHead int
}

const systemPrompts = 32

// NewWorkload returns a deterministic workload.
func NewWorkload(names events.Names, workers, blockSize int, seed uint64) *Workload {
	w := &Workload{Names: names, Workers: workers, BlockSize: blockSize, rng: rand.New(rand.NewPCG(seed, 1)), offsets: map[int32]int64{}, clock: 1_700_000_000_000}
	for i := 0; i < workers; i++ {
		w.ws = append(w.ws, &wstate{next: uint64(i+1) << 40})
	}
	w.Conversations = make([][]conversation, workers)
	return w
}

func (w *Workload) workerID(i int) string { return fmt.Sprintf("bench-w%03d", i) }

// tokensOf returns the tokens of block b of a conversation: blocks below
// the system prompt length are the shared prompt's.
func (w *Workload) tokensOf(dst []uint32, c conversation, from, to int) []uint32 {
	for b := from; b < to; b++ {
		var base uint32
		if b < systemBlocks(c.system) {
			base = uint32(c.system)*2_000_003 + uint32(b)*uint32(w.BlockSize)
		} else {
			base = c.id*7_919 + 1_000_000_000 + uint32(b)*uint32(w.BlockSize)
		}
		for j := 0; j < w.BlockSize; j++ {
			dst = append(dst, base+uint32(j))
		}
	}
	return dst
}

// systemBlocks is the length in blocks of system prompt s: 4 to 128.
func systemBlocks(s int) int { return (s + 1) * 4 }

// Chain returns the router hash chain of the first n blocks of a
// conversation, as the API would compute it for a prompt.
func (w *Workload) Chain(c conversation, n int) []uint64 {
	return kvhash.Chain(nil, w.tokensOf(nil, c, 0, n), w.BlockSize, 0, false)
}

// NextRecord returns the next kv-events record (16 blocks stored), and
// with evict, a removal of the worker's oldest 16 blocks when it holds
// more than capPerWorker. It returns the record and its block ops.
func (w *Workload) NextRecord(capPerWorker int) (*kgo.Record, int) {
	i := w.rng.IntN(w.Workers)
	ws := w.ws[i]
	id := w.workerID(i)
	ref := &pb.WorkerRef{WorkerId: id}
	w.clock++
	if capPerWorker > 0 && len(ws.held)-ws.heldHead > capPerWorker {
		n := 16
		hs := slices.Clone(ws.held[ws.heldHead : ws.heldHead+n])
		ws.heldHead += n
		if ws.heldHead > 4096 {
			ws.held = slices.Clone(ws.held[ws.heldHead:])
			ws.heldHead = 0
		}
		return w.frame(id, &pb.KvEventRecord{Worker: ref, EventTimeUnixNano: w.clock * 1e6, Events: []*pb.KvEvent{{Event: &pb.KvEvent_Removed{Removed: &pb.BlockRemoved{BlockHashes: hs}}}}}), n
	}
	if ws.convo.length == 0 || ws.pos >= ws.convo.length {
		s := w.rng.IntN(systemPrompts)
		// 64 to 1,488 blocks (1k to 24k tokens at 16 per block).
		ws.convo = conversation{system: s, length: 16 * (4 + w.rng.IntN(90)), id: w.rng.Uint32() % 1_000_000}
		ws.convo.length = max(ws.convo.length, systemBlocks(s)+16)
		ws.pos = 0
		w.Conversations[i] = append(w.Conversations[i], ws.convo)
	}
	n := min(16, ws.convo.length-ws.pos)
	hashes := make([]uint64, n)
	for k := range hashes {
		ws.next++
		hashes[k] = engineHash(ws.next)
	}
	st := &pb.BlockStored{BlockHashes: hashes, TokenIds: w.tokensOf(nil, ws.convo, ws.pos, ws.pos+n), BlockSize: uint32(w.BlockSize), Tier: pb.Tier_TIER_DEVICE}
	if ws.pos > 0 {
		p := ws.lastEng
		st.ParentBlockHash = &p
	}
	ws.pos += n
	ws.lastEng = hashes[n-1]
	ws.held = append(ws.held, hashes...)
	return w.frame(id, &pb.KvEventRecord{Worker: ref, EventTimeUnixNano: w.clock * 1e6, Events: []*pb.KvEvent{{Event: &pb.KvEvent_Stored{Stored: st}}}}), n
}

// engineHash scrambles a counter into an engine block hash. Engines'
// hashes are digests (vLLM: sha256 or xxhash of parent and tokens), so
// their order says nothing of chain order; sequential hashes would hand the
// store a layout in chain order for free. The finalizer of splitmix64 is a
// bijection, so hashes stay distinct.
func engineHash(n uint64) uint64 {
	n ^= n >> 30
	n *= 0xbf58476d1ce4e5b9
	n ^= n >> 27
	n *= 0x94d049bb133111eb
	return n ^ n>>31
}

func (w *Workload) frame(key string, m *pb.KvEventRecord) *kgo.Record {
	r, err := events.NewRecord(w.Names, []byte(key), m)
	if err != nil {
		panic(err)
	}
	r.Partition = 0
	r.Offset = w.offsets[0]
	w.offsets[0]++
	r.Timestamp = time.UnixMilli(w.clock)
	return r
}

// Registrations returns the workers' registration records (workers topic).
func (w *Workload) Registrations() []*kgo.Record {
	var out []*kgo.Record
	for i := 0; i < w.Workers; i++ {
		r, _ := events.NewRecord(w.Names, []byte(w.workerID(i)), &pb.WorkerRegistration{WorkerId: w.workerID(i), Pool: pb.Pool_POOL_DECODE, Model: "m", BlockSize: uint32(w.BlockSize)})
		r.Offset = int64(i)
		out = append(out, r)
	}
	return out
}

// Records returns records worth at least ops block operations.
func (w *Workload) Records(ops, capPerWorker int) ([]*kgo.Record, int) {
	var out []*kgo.Record
	n := 0
	for n < ops {
		r, k := w.NextRecord(capPerWorker)
		out = append(out, r)
		n += k
	}
	return out, n
}

// OpenStore opens a fresh store in dir, with the product's default options.
func OpenStore(dir string, names events.Names) (*statestore.Store, error) {
	return statestore.Open(dir, statestore.Options{Names: names, Registerer: prometheus.NewRegistry()})
}

// ApplyAll applies records in batches of 1,000 (a typical poll).
func ApplyAll(s *statestore.Store, recs []*kgo.Record) error {
	for i := 0; i < len(recs); i += 1000 {
		if err := s.Apply(recs[i:min(i+1000, len(recs))]); err != nil {
			return err
		}
	}
	return nil
}

// Run runs every measurement and writes the table to out.
func Run(ctx context.Context, cfg Config, out io.Writer) ([]Result, error) {
	cfg.defaults()
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "pdrouter-bench-store-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	names := events.Names{}
	var res []Result
	add := func(r Result) {
		res = append(res, r)
		cfg.Log.Info("bench store", "measure", r.Measure, "value", r.Value, "verdict", r.Verdict)
	}
	// 1. Apply rate, records already in memory, into Pebble and the index.
	{
		w := NewWorkload(names, cfg.Workers, cfg.BlockSize, 1)
		recs, ops := w.Records(cfg.ApplyBlockOps, 8000)
		s, err := OpenStore(filepath.Join(dir, "apply"), names)
		if err != nil {
			return nil, err
		}
		if err := ApplyAll(s, w.Registrations()); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := ApplyAll(s, recs); err != nil {
			return nil, err
		}
		el := time.Since(start)
		_ = s.Close()
		rate := float64(ops) / el.Seconds()
		add(benchtable.NewRow("apply rate (in-memory records → Pebble + index)", fmt.Sprintf("%.0fk block ops/s", rate/1e3), "≥ 500k (goal 2M)", benchtable.Verdict(rate >= 500e3),
			fmt.Sprintf("%d block ops (16/record, stores and evictions), %d workers, %s", ops, cfg.Workers, el.Round(time.Millisecond))))
	}

	// 2-4. A store of cfg.Entries cached entries: memory, queries, bootstrap.
	w := NewWorkload(names, cfg.Workers, cfg.BlockSize, 2)
	recs, _ := w.Records(cfg.Entries, 0)
	regs := w.Registrations()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	s, err := OpenStore(filepath.Join(dir, "big"), names)
	if err != nil {
		return nil, err
	}
	if err := ApplyAll(s, regs); err != nil {
		return nil, err
	}
	if err := ApplyAll(s, recs); err != nil {
		return nil, err
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(recs)
	recs = nil
	ms := s.MemoryStats()
	heap := float64(int64(m1.HeapAlloc) - int64(m0.HeapAlloc))
	add(benchtable.NewRow("hot index bytes per cached (block, worker) entry", fmt.Sprintf("%.1f B", float64(ms.HotIndexBytes)/float64(ms.Entries)), "goal ≤ 48", benchtable.Verdict(float64(ms.HotIndexBytes)/float64(ms.Entries) <= 48),
		fmt.Sprintf("%d entries over %d distinct hashes; router hash → holders (estimate from capacities)", ms.Entries, ms.DistinctHashes)))
	add(benchtable.NewRow("all in-memory state per entry (measured heap)", fmt.Sprintf("%.1f B", heap/float64(ms.Entries)), "report", "",
		fmt.Sprintf("Go heap delta after GC: hot index + engine tables (%.1f B/entry est.) + rest", float64(ms.EngineTableBytes)/float64(ms.Entries))))

	// The same query on the store that applied the events: its hot index
	// arena is in arrival order (runs of 16 blocks, one record each), not
	// yet in the chain order a rebuild gives it.
	{
		lat, _ := queryLatency(s, w, cfg)
		add(benchtable.NewRow("overlap query, same, on the live store (arena in arrival order)",
			fmt.Sprintf("p99 %s", lat[len(lat)*99/100]), "report", "",
			fmt.Sprintf("p50 %s, max %s, %d queries", lat[len(lat)/2], lat[len(lat)-1], len(lat))))
	}

	snap := filepath.Join(dir, "snap")
	if _, err := s.Checkpoint(snap); err != nil {
		return nil, err
	}
	_ = s.Close()
	start := time.Now()
	b, err := statestore.OpenFromSnapshot(snap, filepath.Join(dir, "boot"), statestore.Options{Names: names, Registerer: prometheus.NewRegistry()})
	if err != nil {
		return nil, err
	}
	el := time.Since(start)
	add(benchtable.NewRow(fmt.Sprintf("bootstrap from a snapshot of %.1fM entries", float64(ms.Entries)/1e6), el.Round(time.Millisecond).String(), "≤ 5s", benchtable.Verdict(el <= 5*time.Second),
		"link the checkpoint, open Pebble, rebuild the hot index"))
	// Queries on the bootstrapped replica: its index was rebuilt from
	// Pebble, as after any start (arena in chain order), and no compaction
	// competes for the CPU.
	runtime.GC()
	lat, depth := queryLatency(b, w, cfg)
	p50, p99, pmax := lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	add(benchtable.NewRow(fmt.Sprintf("overlap query, %d-block request, %d workers, %.1fM entries", cfg.ChainBlocks, cfg.Workers, float64(ms.Entries)/1e6),
		fmt.Sprintf("p99 %s", p99), "p99 ≤ 20µs", benchtable.Verdict(p99 <= 20*time.Microsecond),
		fmt.Sprintf("p50 %s, max %s, %d queries; mean deepest match %.0f blocks", p50, pmax, len(lat), depth)))

	_ = b.Close()

	// 5. Full replay.
	{
		w := NewWorkload(names, cfg.Workers, cfg.BlockSize, 3)
		recs, ops := w.Records(cfg.ReplayBlockOps, 8000)
		s, err := OpenStore(filepath.Join(dir, "replay"), names)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		if err := ApplyAll(s, append(w.Registrations(), recs...)); err != nil {
			return nil, err
		}
		if err := s.Close(); err != nil {
			return nil, err
		}
		el := time.Since(start)
		add(benchtable.NewRow(fmt.Sprintf("full replay of %.1fM block ops", float64(ops)/1e6), el.Round(time.Millisecond).String(), "report", "",
			fmt.Sprintf("%.0fk block ops/s, flush at close included; 10M would take ~%s", float64(ops)/el.Seconds()/1e3, (el*time.Duration(10e6/float64(ops))).Round(time.Second))))
	}

	// 6. End to end through a broker.
	if r, err := endToEnd(ctx, cfg, dir); err != nil {
		add(benchtable.NewRow("end-to-end apply rate from a broker", "error", "≥ 300k", "FAIL", err.Error()))
	} else {
		add(r)
	}
	benchtable.Print(out, res)
	return res, nil
}

// queryLatency times MatchPrefix for requests that share a system prompt
// with many workers and continue with one worker's conversation, padded
// with uncached blocks to ChainBlocks.
func queryLatency(s *statestore.Store, w *Workload, cfg Config) ([]time.Duration, float64) {
	rng := rand.New(rand.NewPCG(9, 9))
	var chains [][]uint64
	for len(chains) < 256 {
		i := rng.IntN(w.Workers)
		cs := w.Conversations[i]
		if len(cs) == 0 {
			continue
		}
		c := cs[rng.IntN(len(cs))]
		chains = append(chains, w.Chain(c, cfg.ChainBlocks))
	}
	lat := make([]time.Duration, 0, cfg.Queries)
	var depth float64
	s.Read(func(v statestore.View) {
		dst := make([]decider.TierOverlap, len(v.Workers()))
		for q := 0; q < cfg.Queries; q++ {
			ch := chains[q%len(chains)]
			start := time.Now()
			v.MatchPrefix(cfg.BlockSize, ch, dst)
			lat = append(lat, time.Since(start))
			if q < len(chains) {
				best := 0
				for _, o := range dst {
					best = max(best, o.Total())
				}
				depth += float64(best) / float64(len(chains))
			}
		}
	})
	slices.Sort(lat)
	return lat, depth
}

func endToEnd(ctx context.Context, cfg Config, dir string) (Result, error) {
	label := "real broker " + fmt.Sprint(cfg.Brokers)
	opts := cfg.ClientOpts
	if len(cfg.Brokers) == 0 {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return Result{}, err
		}
		defer c.Close()
		opts = []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
		label = "in-process kfake (dev broker, not Kafka)"
	} else if len(opts) == 0 {
		opts = []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}
	}
	prefix := fmt.Sprintf("bench-%d.", time.Now().UnixNano())
	names := events.Names{Prefix: prefix}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.ProducerLinger(5 * time.Millisecond), kgo.MaxBufferedRecords(200_000)}, opts...)...)
	if err != nil {
		return Result{}, err
	}
	defer cl.Close()
	specs, err := migrations.Declarations(migrations.SingleNodeOptions(prefix))
	if err != nil {
		return Result{}, err
	}
	adm := kadm.NewClient(cl)
	if _, err := migrations.Apply(ctx, cl, specs, false); err != nil {
		return Result{}, err
	}
	defer func() {
		var ts []string
		for _, t := range events.AllTopics {
			ts = append(ts, names.Physical(t))
		}
		_, _ = adm.DeleteTopics(context.Background(), ts...)
	}()
	w := NewWorkload(names, cfg.Workers, cfg.BlockSize, 4)
	recs, ops := w.Records(cfg.E2EBlockOps, 8000)
	var errMu sync.Mutex
	var produceErr error
	for _, r := range append(w.Registrations(), recs...) {
		r.Partition, r.Offset = 0, 0
		r.Timestamp = time.Time{}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				errMu.Lock()
				produceErr = err
				errMu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return Result{}, err
	}
	if produceErr != nil {
		return Result{}, fmt.Errorf("end to end: produce: %w", produceErr)
	}
	s, err := statestore.Open(filepath.Join(dir, "e2e"), statestore.Options{Names: names, Registerer: prometheus.NewRegistry()})
	if err != nil {
		return Result{}, err
	}
	defer s.Close()
	m, err := statestore.NewMaterializer(s, statestore.MaterializerOptions{Client: opts, Logger: cfg.Log})
	if err != nil {
		return Result{}, err
	}
	defer m.Close()
	start := time.Now()
	if err := m.CatchUp(ctx); err != nil {
		return Result{}, err
	}
	el := time.Since(start)
	var applied int64
	for _, p := range s.Offsets() {
		applied += p.Next
	}
	if want := int64(len(recs) + cfg.Workers); applied != want {
		return Result{}, fmt.Errorf("end to end: the store applied %d records, %d were produced", applied, want)
	}
	rate := float64(ops) / el.Seconds()
	return benchtable.NewRow("end-to-end apply rate from a broker", fmt.Sprintf("%.0fk block ops/s", rate/1e3), "≥ 300k (real broker)", benchtable.Verdict(rate >= 300e3),
		fmt.Sprintf("%d block ops in %d records, %s; %s", ops, len(recs), el.Round(time.Millisecond), label)), nil
}
