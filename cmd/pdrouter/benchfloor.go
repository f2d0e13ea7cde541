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
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/events/eventstest"
)

// The floor replica is the I/O a replica of the model cannot avoid, with
// none of its own work: it answers the same HTTP requests of the same
// load generator, appends a record of a decision's size for each route
// request (through the same group commit, acks=all) and an outcome-sized
// record for each lifecycle event, and fetches every record of the group's
// topics back with the materializer's fetch settings, but parses, decides,
// encodes, decodes and stores nothing. `bench scale --floor` measures it
// as it measures serve, so the part of a and p that is pdrouter's own is
// their difference from the floor's, measured in one run.

// floorRecordStep is the prompt length step, in blocks, between the
// decision records the floor replica holds ready.
const floorRecordStep = 64

// floorOutcomeBytes is the size of a lifecycle event's record: an outcome
// of a completed request with its ids and counts is ~100–150 bytes.
const floorOutcomeBytes = 128

func newBenchFloorReplicaCmd(a *app) *cobra.Command {
	var httpAddr, debugAddr string
	var maxTokens, blockSize, decode, prefill int
	cmd := &cobra.Command{
		Use:    "floor-replica",
		Short:  "The floor replica of 'bench scale --floor': a replica's I/O without its work",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.tuneMemory(); err != nil {
				return err
			}
			opts, err := a.kafkaOpts("pdrouter-floor")
			if err != nil {
				return err
			}
			return runFloorReplica(cmd.Context(), floorConfig{names: a.names(), connOpts: opts, httpAddr: httpAddr, debugAddr: debugAddr,
				maxBlocks: maxTokens / max(1, blockSize), decode: decode, prefill: prefill})
		},
	}
	f := cmd.Flags()
	f.StringVar(&httpAddr, "http-addr", "127.0.0.1:0", "address of the API the load generator calls")
	f.StringVar(&debugAddr, "debug-addr", "", "serve Go's /debug/pprof profiles on this address")
	f.IntVar(&maxTokens, "max-tokens", 32768, "longest prompt, in tokens: sizes the largest decision record")
	f.IntVar(&blockSize, "block-size", 16, "tokens per block of the prompts' hash chains")
	f.IntVar(&decode, "decode-workers", 128, "decode workers: the candidate rows of a decision record, and the keys records go under")
	f.IntVar(&prefill, "prefill-workers", 32, "prefill workers: candidate rows of a decision record")
	return cmd
}

type floorConfig struct {
	names               events.Names
	connOpts            []kgo.Opt
	httpAddr, debugAddr string
	maxBlocks           int
	decode, prefill     int
}

type floorReplica struct {
	names events.Names
	log   *api.GroupLog
	// decisions[i] is the value of a decision record whose prompt has
	// i·floorRecordStep blocks, built by the events encoder once at start.
	decisions [][]byte
	outcome   []byte
	keys      [][]byte // the decode workers' ids, which records are keyed by
	next      atomic.Uint64
	fetched   prometheus.Counter
	bodies    sync.Pool
}

func runFloorReplica(ctx context.Context, cfg floorConfig) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := &floorReplica{names: cfg.names, outcome: bytes.Repeat([]byte{0x5a}, floorOutcomeBytes),
		fetched: prometheus.NewCounter(prometheus.CounterOpts{Name: "pdrouter_floor_fetched_records_total", Help: "Records the floor replica fetched from its group's topics."}),
		bodies:  sync.Pool{New: func() any { return new(bytes.Buffer) }}}
	reg.MustRegister(f.fetched)
	for i := range max(1, cfg.decode) {
		f.keys = append(f.keys, fmt.Appendf(nil, "decode-%03d", i))
	}
	for blocks := 0; blocks <= cfg.maxBlocks+floorRecordStep; blocks += floorRecordStep {
		v, err := events.Marshal(eventstest.Decision(cfg.decode, cfg.prefill, blocks))
		if err != nil {
			return err
		}
		f.decisions = append(f.decisions, v)
	}
	prod, err := kgo.NewClient(append(append([]kgo.Opt{}, cfg.connOpts...), api.GroupLogClientOpts()...)...)
	if err != nil {
		return err
	}
	defer prod.Close()
	f.log = api.NewGroupLog(prod, cfg.names, 64<<20, nil)
	var topics []string
	for _, t := range events.AllTopics {
		topics = append(topics, cfg.names.Physical(t))
	}
	cons, err := kgo.NewClient(append(append([]kgo.Opt{}, cfg.connOpts...),
		kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
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
	if cfg.debugAddr != "" {
		dl, err := net.Listen("tcp", cfg.debugAddr)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		ds := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = ds.Serve(dl) }()
		defer ds.Close()
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

// readBody reads the request's body into a pooled buffer, as the API does.
func (f *floorReplica) readBody(c *gin.Context) (*bytes.Buffer, bool) {
	buf := f.bodies.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(c.Request.Body, 8<<20)); err != nil {
		f.bodies.Put(buf)
		c.Status(http.StatusBadRequest)
		return nil, false
	}
	return buf, true
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
	v := f.decisions[min(len(f.decisions)-1, blocks/floorRecordStep)]
	if f.append(c, events.TopicDecisions, v) {
		c.Data(http.StatusOK, "application/json", []byte(`{"decision_id":"floor","mode":"remote"}`))
	}
}

func (f *floorReplica) lifecycle(c *gin.Context) {
	buf, ok := f.readBody(c)
	if !ok {
		return
	}
	f.bodies.Put(buf)
	if f.append(c, events.TopicOutcomes, f.outcome) {
		c.Data(http.StatusAccepted, "application/json", floorOffsets)
	}
}

func (f *floorReplica) append(c *gin.Context, t events.Topic, v []byte) bool {
	key := f.keys[f.next.Add(1)%uint64(len(f.keys))]
	ctx, cancel := context.WithTimeout(c.Request.Context(), 10*time.Second)
	defer cancel()
	if _, err := f.log.Append(ctx, &kgo.Record{Topic: f.names.Physical(t), Key: key, Value: v}); err != nil {
		c.String(http.StatusServiceUnavailable, err.Error())
		return false
	}
	return true
}
