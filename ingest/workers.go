package ingest

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// SourceOf turns a registration into a source description, or ok=false
// when the worker publishes no KV events. A registration with a topic and
// no endpoint describes an engine that connects to ingest's bind endpoint.
func SourceOf(reg *pb.WorkerRegistration) (SourceConfig, bool) {
	if reg.GetKvEventsEndpoint() == "" && reg.GetKvEventsTopic() == "" {
		return SourceConfig{}, false
	}
	return SourceConfig{
		WorkerID:   reg.GetWorkerId(),
		Endpoint:   reg.GetKvEventsEndpoint(),
		Replay:     reg.GetKvReplayEndpoint(),
		Topic:      reg.GetKvEventsTopic(),
		DPSize:     int(reg.GetDpSize()),
		Engine:     engineName(reg.GetEngine()),
		MetricsURL: reg.GetMetricsUrl(),
	}, true
}

func engineName(e pb.Engine) string {
	switch e {
	case pb.Engine_ENGINE_SGLANG:
		return "sglang"
	case pb.Engine_ENGINE_TRTLLM:
		return "trtllm"
	case pb.Engine_ENGINE_SIM:
		return "sim"
	}
	return "vllm"
}

// watchWorkers follows the compacted workers topic from its start: every
// registration with KV endpoints becomes (or updates) a source, a tombstone
// stops it. Sources from the config file win over registrations of the same
// worker id only until a registration arrives: the log is the truth.
func (ing *Ingest) watchWorkers(ctx context.Context) error {
	opts := append(append([]kgo.Opt{}, ing.deps.KafkaOpts...),
		kgo.ConsumeTopics(ing.cfg.Names.Physical(events.TopicWorkers)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			ing.log.Warn("reading workers", "topic", t, "partition", p, "err", err)
		})
		fs.EachRecord(func(r *kgo.Record) { ing.applyWorker(r) })
	}
}

func (ing *Ingest) applyWorker(r *kgo.Record) {
	env, err := events.Decode(ing.cfg.Names, r)
	if err != nil {
		ing.log.Warn("skipping an undecodable workers record", "err", err)
		return
	}
	worker := string(env.Key)
	if env.Tombstone() {
		ing.mu.Lock()
		delete(ing.regs, worker)
		ing.mu.Unlock()
		ing.Remove(worker)
		return
	}
	reg, ok := env.Message.(*pb.WorkerRegistration)
	if !ok {
		return
	}
	if !ing.cfg.Cell.OwnsWorker(reg.GetWorkerId()) {
		return // another cell's ingest reads it
	}
	ing.mu.Lock()
	ing.regs[reg.GetWorkerId()] = reg
	ing.mu.Unlock()
	if sc, ok := SourceOf(reg); ok {
		if strings.Contains(sc.Endpoint, "*") {
			ing.log.Warn("registration's kv_events_endpoint is a bind address, not one ingest can dial", "worker", sc.WorkerID, "endpoint", sc.Endpoint)
			return
		}
		ing.Upsert(sc)
	}
}
