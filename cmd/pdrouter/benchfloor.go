package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
	"github.com/pdrouter/pdrouter/internal/addrfile"
	"github.com/pdrouter/pdrouter/statestore"
)

// The floor replica is the I/O a replica of the model cannot avoid, with
// none of its own work: it answers the same HTTP requests of the same
// load generator, appends a record of a decision's size for each route
// request (through the same group commit, acks=all) and an outcome-sized
// record for each lifecycle event, each with its load delta when its
// --load-deltas mode writes them (with snapshots, in its own partition, and
// one load-share snapshot per group commit of the workers its appends
// touched), and fetches back every record of the topics the mode reads
// with the materializer's fetch settings (with snapshots, every load-shares
// partition and only its own of load-deltas, as a replica), but parses, decides,
// encodes, decodes and stores nothing. `bench scale --floor` measures it
// as it measures serve, so the part of a and p that is pdrouter's own is
// their difference from the floor's, measured in one run.

// The floor replica's counters, which bench scale reads.
const (
	floorAppendedMetric = "pdrouter_floor_appended_records_total"
	floorFetchedMetric  = "pdrouter_floor_fetched_records_total"
	// floorOwnMetric counts the records a floor replica appended that it
	// alone fetches back: its own load deltas with --load-deltas
	// snapshots, none otherwise.
	floorOwnMetric = "pdrouter_floor_own_appended_records_total"
)

// floorRecordStep is the prompt length step, in blocks, between the
// decision records the floor replica holds ready.
const floorRecordStep = 64

// Bounds of the floor replica's inputs: its flags size what it builds at
// start, and a body is read whole.
const (
	floorMaxTokens  = 1 << 21  // the API's default longest prompt
	floorMaxWorkers = 20000    // candidate rows of one record
	floorBodyLimit  = 16 << 20 // the API's default body limit
)

func newBenchFloorReplicaCmd(a *app) *cobra.Command {
	var httpAddr, debugAddr, addrFile, replicaID string
	var maxTokens, blockSize, decode, prefill int
	var loadDeltas string
	cmd := &cobra.Command{
		Use:    "floor-replica",
		Short:  "The floor replica of 'bench scale --floor': a replica's I/O without its work",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if maxTokens < 1 || maxTokens > floorMaxTokens || blockSize < 1 || blockSize > events.MaxBlockSize ||
				decode < 1 || decode > floorMaxWorkers || prefill < 0 || prefill > floorMaxWorkers {
				return fmt.Errorf("bench floor-replica: want --max-tokens in [1, %d], --block-size in [1, %d], --decode-workers in [1, %d], --prefill-workers in [0, %d]",
					floorMaxTokens, events.MaxBlockSize, floorMaxWorkers, floorMaxWorkers)
			}
			write, src, err := parseLoadDeltas(loadDeltas)
			if err != nil {
				return err
			}
			if err := a.tuneMemory(); err != nil {
				return err
			}
			opts, err := a.kafkaOpts("pdrouter-floor")
			if err != nil {
				return err
			}
			return runFloorReplica(cmd.Context(), floorConfig{names: a.names(), connOpts: opts, httpAddr: httpAddr, debugAddr: debugAddr, addrFile: addrFile,
				maxBlocks: maxTokens / blockSize, decode: decode, prefill: prefill, writeDeltas: write, source: src, replicaID: replicaID})
		},
	}
	f := cmd.Flags()
	f.StringVar(&httpAddr, "http-addr", "127.0.0.1:0", "address of the API the load generator calls")
	f.StringVar(&debugAddr, "debug-addr", "", "serve Go's /debug/pprof profiles on this address")
	f.StringVar(&addrFile, "addr-file", "", "as serve's: write the bound addresses to this file once the API accepts requests")
	f.IntVar(&maxTokens, "max-tokens", 32768, "longest prompt, in tokens: sizes the largest decision record")
	f.IntVar(&blockSize, "block-size", 16, "tokens per block of the prompts' hash chains")
	f.IntVar(&decode, "decode-workers", 128, "decode workers: the candidate rows of a decision record, and the keys records go under")
	f.IntVar(&prefill, "prefill-workers", 32, "prefill workers: candidate rows of a decision record")
	f.StringVar(&loadDeltas, "load-deltas", "write", "as serve's: whether each decision and lifecycle event goes with its load delta (write, apply, snapshots), and which topics are fetched back (apply: load deltas, not decisions and outcomes; snapshots: every load-shares partition and the replica's own of load-deltas, where its deltas go, and a load-share snapshot per group commit)")
	f.StringVar(&replicaID, "replica-id", "floor", "as serve's: with --load-deltas snapshots, the key of the replica's snapshots and of its load-deltas partition; distinct in a group")
	return cmd
}

type floorConfig struct {
	names               events.Names
	connOpts            []kgo.Opt
	httpAddr, debugAddr string
	addrFile            string
	maxBlocks           int
	decode, prefill     int
	writeDeltas         bool
	source              statestore.Source
	replicaID           string
}

type floorReplica struct {
	log *api.GroupLog
	// decisions[i] is the value of a decision record whose prompt has
	// i·floorRecordStep blocks, and outcome that of a completed request's
	// lifecycle event: real records, built by the events encoder once at
	// start, so the floor's topics hold only what a replica could read.
	decisions []*kgo.Record
	outcome   *kgo.Record
	// With load deltas: deltas[i][k] is the load delta of decisions[i]
	// for decode worker k (a delta names its worker, as its key), and
	// lifecycleDeltas[k] that of the outcome.
	deltas          [][]*kgo.Record
	lifecycleDeltas []*kgo.Record
	// fetchedTopics: the topics the floor fetches back, whose appends it
	// counts.
	fetchedTopics map[string]bool
	fetchesDeltas bool // the load deltas' topic is among them
	// shares, with --load-deltas snapshots, gives each group commit the
	// touched workers' snapshot; the replica's deltas then go to its own
	// partition, the only one of load-deltas it fetches.
	shares     *floorShares
	deltaTopic string   // its physical name
	keys       [][]byte // the decode workers' ids, which records are keyed by
	next       atomic.Uint64
	// appended and fetched let bench scale check that each floor replica
	// fetched every record its group appended: a floor that fetched less
	// would be a lower floor than the replicas'. Records, not entries, on
	// both sides: plainAppended counts the records of the fetched topics
	// other than load deltas, and the group log the delta records it
	// produced after merging and the snapshots it wrote, so fetching
	// parses nothing. With snapshots every replica fetches the group's
	// snapshots but only its own deltas: those are "own" (floorOwnMetric).
	plainAppended atomic.Uint64
	fetched       prometheus.Counter
	bodies        sync.Pool
}

func runFloorReplica(ctx context.Context, cfg floorConfig) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := &floorReplica{
		fetched: prometheus.NewCounter(prometheus.CounterOpts{Name: floorFetchedMetric, Help: "Records the floor replica fetched from its group's topics."}),
		bodies:  sync.Pool{New: func() any { return new(bytes.Buffer) }}}
	reg.MustRegister(f.fetched, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: floorAppendedMetric, Help: "Records the floor replica appended to its group's topics."},
		func() float64 {
			n := f.plainAppended.Load() + f.log.ShareRecords()
			if f.fetchesDeltas && f.shares == nil {
				n += f.log.DeltaRecords()
			}
			return float64(n)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: floorOwnMetric, Help: "Records the floor replica appended that it alone fetches back (its own load deltas with --load-deltas snapshots)."},
			func() float64 {
				if f.shares == nil {
					return 0
				}
				return float64(f.log.DeltaRecords())
			}))
	for i := range cfg.decode {
		f.keys = append(f.keys, fmt.Appendf(nil, "decode-%03d", i))
	}
	completed := uint64(256)
	ev := &pb.OutcomeEvent{RequestId: "bench-00000000-1000000", DecisionId: "01JDX3Q8W6ZK2M4N5P6R7S8T9V",
		Kind: pb.OutcomeEvent_KIND_COMPLETED, DecodeWorker: &pb.WorkerRef{WorkerId: string(f.keys[0])},
		EventTimeUnixNano: 1764400001000000000, OutputTokens: &completed}
	outcome, err := events.NewRecord(cfg.names, f.keys[0], ev)
	if err != nil {
		return err
	}
	f.outcome = outcome
	if cfg.writeDeltas {
		if f.lifecycleDeltas, err = floorDeltas(cfg.names, f.keys, ev, cfg.replicaID); err != nil {
			return err
		}
	}
	for blocks := 0; blocks <= cfg.maxBlocks+floorRecordStep; blocks += floorRecordStep {
		d := eventstest.Decision(cfg.decode, cfg.prefill, blocks)
		v, err := events.NewRecord(cfg.names, f.keys[0], d)
		if err != nil {
			return err
		}
		f.decisions = append(f.decisions, v)
		if cfg.writeDeltas {
			ds, err := floorDeltas(cfg.names, f.keys, d, cfg.replicaID)
			if err != nil {
				return err
			}
			f.deltas = append(f.deltas, ds)
		}
	}
	snapshots := cfg.source == statestore.SourceLoadShares
	prodOpts := append(append([]kgo.Opt{}, cfg.connOpts...), api.GroupLogClientOpts()...)
	if snapshots {
		prodOpts = append(prodOpts, kgo.RecordPartitioner(api.WriterPartitioner(cfg.names, cfg.replicaID, events.Cell{})))
	}
	prod, err := kgo.NewClient(prodOpts...)
	if err != nil {
		return err
	}
	defer prod.Close()
	f.log = api.NewGroupLog(prod, cfg.names, 64<<20, reg)
	f.deltaTopic = cfg.names.Physical(events.TopicLoadDeltas)
	var topics []string
	var own map[string]map[int32]kgo.Offset
	f.fetchedTopics = map[string]bool{}
	for _, t := range cfg.source.Topics() {
		f.fetchedTopics[cfg.names.Physical(t)] = true
		f.fetchesDeltas = f.fetchesDeltas || t == events.TopicLoadDeltas
		if snapshots && t == events.TopicLoadDeltas {
			p, err := floorOwnPartition(ctx, prod, f.deltaTopic, cfg.replicaID)
			if err != nil {
				return err
			}
			own = map[string]map[int32]kgo.Offset{f.deltaTopic: {p: kgo.NewOffset().AtStart()}}
			continue
		}
		topics = append(topics, cfg.names.Physical(t))
	}
	if snapshots {
		f.shares = newFloorShares(cfg.replicaID, f.keys)
		if err := f.log.ShareLoad(ctx, f.shares, cfg.replicaID, nil); err != nil {
			return err
		}
	}
	cons, err := kgo.NewClient(append(append([]kgo.Opt{}, cfg.connOpts...),
		kgo.ConsumeTopics(topics...), kgo.ConsumePartitions(own), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(8<<20),
		kgo.FetchMinBytes(defaultFetchMinBytes), kgo.FetchMaxWait(defaultFetchMaxWait))...)
	if err != nil {
		return err
	}
	defer cons.Close()
	go f.fetch(ctx, cons)

	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.GET("/readyz", func(c *gin.Context) { c.Status(http.StatusOK) })
	e.GET("/metrics", gin.WrapH(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	e.POST("/v1/workers", f.accept)
	e.POST("/v1/events/kv", f.accept)
	e.POST("/v1/route", f.route)
	e.POST("/v1/requests/:id/events", f.lifecycle)
	ln, err := net.Listen("tcp", cfg.httpAddr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	bound := addrfile.Addrs{HTTP: ln.Addr().String()}
	if cfg.debugAddr != "" {
		dl, err := net.Listen("tcp", cfg.debugAddr)
		if err != nil {
			return err
		}
		bound.Debug = dl.Addr().String()
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		ds := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = ds.Serve(dl) }()
		defer ds.Close()
	}
	if cfg.addrFile != "" {
		if err := addrfile.Write(cfg.addrFile, bound); err != nil {
			_ = ln.Close()
			return err
		}
	}
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// fetch reads every record of the group's topics, as a replica's
// materializer does, and only counts them.
func (f *floorReplica) fetch(ctx context.Context, cl *kgo.Client) {
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		n := 0
		fs.EachRecord(func(*kgo.Record) { n++ })
		f.fetched.Add(float64(n))
	}
}

// readBody reads the request's body into a pooled buffer, as the API
// does: at most floorBodyLimit bytes, a longer body answered 413.
func (f *floorReplica) readBody(c *gin.Context) (*bytes.Buffer, bool) {
	buf := f.bodies.Get().(*bytes.Buffer)
	buf.Reset()
	n, err := buf.ReadFrom(io.LimitReader(c.Request.Body, floorBodyLimit+1))
	switch {
	case err != nil:
		c.String(http.StatusBadRequest, "reading the body: %v", err)
	case n > floorBodyLimit:
		c.String(http.StatusRequestEntityTooLarge, "the body is over %d bytes", floorBodyLimit)
	default:
		return buf, true
	}
	f.bodies.Put(buf)
	return nil, false
}

var floorOffsets = []byte(`{"offsets":{}}`)

func (f *floorReplica) accept(c *gin.Context) {
	if buf, ok := f.readBody(c); ok {
		f.bodies.Put(buf)
		c.Data(http.StatusAccepted, "application/json", floorOffsets)
	}
}

// route appends the decision record of a prompt of the body's length: the
// body's commas count its block hashes.
func (f *floorReplica) route(c *gin.Context) {
	buf, ok := f.readBody(c)
	if !ok {
		return
	}
	blocks := bytes.Count(buf.Bytes(), []byte{','})
	f.bodies.Put(buf)
	i := min(len(f.decisions)-1, blocks/floorRecordStep)
	var deltas []*kgo.Record
	if f.deltas != nil {
		deltas = f.deltas[i]
	}
	if f.append(c, f.decisions[i], deltas) {
		c.Data(http.StatusOK, "application/json", []byte(`{"decision_id":"floor","mode":"remote"}`))
	}
}

func (f *floorReplica) lifecycle(c *gin.Context) {
	buf, ok := f.readBody(c)
	if !ok {
		return
	}
	f.bodies.Put(buf)
	if f.append(c, f.outcome, f.lifecycleDeltas) {
		c.Data(http.StatusAccepted, "application/json", floorOffsets)
	}
}

// append appends a copy of the record tmpl under the next worker's key,
// with that worker's delta when deltas holds them (one per worker), in one
// append as the API does.
func (f *floorReplica) append(c *gin.Context, tmpl *kgo.Record, deltas []*kgo.Record) bool {
	k := f.next.Add(1) % uint64(len(f.keys))
	if f.shares != nil {
		f.shares.touch(int(k))
	}
	recs := []*kgo.Record{{Topic: tmpl.Topic, Key: f.keys[k], Value: tmpl.Value, Headers: tmpl.Headers}}
	if deltas != nil {
		d := deltas[k]
		recs = append(recs, &kgo.Record{Topic: d.Topic, Key: d.Key, Value: d.Value, Headers: d.Headers})
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 10*time.Second)
	defer cancel()
	if _, err := f.log.Append(ctx, recs...); err != nil {
		c.String(http.StatusServiceUnavailable, err.Error())
		return false
	}
	for _, r := range recs {
		if f.fetchedTopics[r.Topic] && r.Topic != f.deltaTopic {
			f.plainAppended.Add(1)
		}
	}
	return true
}

// floorDeltas returns the load delta of m (a decision or an outcome) as
// each decode worker would have it, under its key, written by writer: real
// records, which every replica's validation accepts.
func floorDeltas(names events.Names, keys [][]byte, m proto.Message, writer string) ([]*kgo.Record, error) {
	out := make([]*kgo.Record, len(keys))
	for k, key := range keys {
		w := &pb.WorkerRef{WorkerId: string(key)}
		d := &pb.LoadDelta{WriterId: writer}
		switch v := proto.Clone(m).(type) {
		case *pb.DecisionRecord:
			v.DecodeWorker = w
			d.Decisions = []*pb.DecisionDelta{statestore.DecisionDeltaOf(v)}
		case *pb.OutcomeEvent:
			v.DecodeWorker = w
			d.Lifecycle = []*pb.LifecycleDelta{statestore.LifecycleDeltaOf(v)}
		}
		r, err := events.NewRecord(names, key, d)
		if err != nil {
			return nil, err
		}
		out[k] = r
	}
	return out, nil
}

// floorOwnPartition is the partition of the load deltas' topic that writer
// appends its deltas to and reads back (events.WriterPartition).
func floorOwnPartition(ctx context.Context, cl *kgo.Client, topic, writer string) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("bench floor-replica: the partitions of %s: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		return 0, fmt.Errorf("bench floor-replica: the topic %s is not there (%v): run pdrouter migrate", topic, d.Err)
	}
	return events.WriterPartition(writer, int32(len(d.Partitions)), events.Cell{}), nil
}
