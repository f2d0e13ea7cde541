package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/latmodel"
)

// LocalRouter runs pdrouter's decider in-process against an exact view of the
// simulated fleet, with no HTTP, Kafka or ingest in between. It is what the offline
// mode and the policy comparison use: deterministic and fast.
//
// The view it gives the decider is what a router with zero-lag KV events and load
// samples would hold: overlaps read straight from each engine's prefix cache, load
// samples from each engine's queues, and the router-side active accounting kept here
// from decisions and lifecycle events by the rules of conditional-disagg.md (a
// decision adds the request's blocks to its decode worker, deduplicated by hash, plus
// its partial last block; the worker that prefills carries the prompt tokens it must
// compute until prefill_done; completion frees the blocks). The live router sees the
// same things through its materialized state, late by the pipeline's lag.
//
// By default it is one router. WithReplicas makes it several replicas that see each
// other's accounting late (replicas.go), to measure what that lag costs decisions.
type LocalRouter struct {
	dc *decider.Decider
	// HidePrefill keeps prefill workers out of the decider's view, so every request
	// is prefilled on its decode worker (aggregated_no_prefill_workers): the
	// "always local" baseline on the same fleet.
	hidePrefill bool
	view        *fleetView
	dec         decider.Decision
	inflight    map[string]*activeEntry
	// lat is the online latency model, fed as the product's state feeds it: each
	// decision's features, then its outcomes' TTFT and ITL, stamped with simulated
	// time (docs/slo-policy.md). The slo policy reads its fit.
	lat *latmodel.Model
	// lats, with Replicas.OwnModels, is each replica's model instead of lat.
	lats  []*latmodel.Model
	turn  int // the replica the next request reaches
	fleet *Fleet
	// reps is the replicas' accounting; nil: one router, whose accounting is
	// view.active.
	reps     *replicaSet
	replicas Replicas
}

// LocalRouterOption configures a LocalRouter.
type LocalRouterOption func(*LocalRouter)

// NewLocalRouter builds the decider for cfg. hidePrefill makes every decision local.
func NewLocalRouter(cfg decider.Config, hidePrefill bool, opts ...LocalRouterOption) (*LocalRouter, error) {
	dc, err := decider.New(cfg)
	if err != nil {
		return nil, err
	}
	lr := &LocalRouter{dc: dc, hidePrefill: hidePrefill, inflight: map[string]*activeEntry{},
		lat: latmodel.New(latmodel.Config{}), replicas: Replicas{N: 1}}
	for _, o := range opts {
		o(lr)
	}
	if err := lr.replicas.Validate(); err != nil {
		return nil, err
	}
	if lr.replicas.OwnModels {
		for range lr.replicas.N {
			lr.lats = append(lr.lats, latmodel.New(latmodel.Config{}))
		}
	}
	return lr, nil
}

type activeEntry struct {
	decode, prefillAt int // worker refs; prefillAt carries prefillTok
	chain             []uint64
	extra             int64
	prefillTok        int64
	replica           int // the replica that decided
}

func (lr *LocalRouter) attach(f *Fleet) {
	v := &fleetView{lat: lr.lat, q: &f.q}
	lr.fleet = f
	for _, e := range f.engines {
		if lr.hidePrefill && e.cfg.Pool == PoolPrefill {
			continue
		}
		pool := decider.PoolDecode
		if e.cfg.Pool == PoolPrefill {
			pool = decider.PoolPrefill
		}
		v.engines = append(v.engines, e)
		v.workers = append(v.workers, decider.WorkerInfo{ID: e.cfg.ID, Pool: pool, Model: e.cfg.Model,
			BlockSize: e.cfg.BlockSize, TotalKVBlocks: int64(e.cfg.NumBlocks), MaxNumBatchedTokens: int64(e.cfg.MaxBatchedTokens)})
		v.active = append(v.active, workerActive{blocks: map[uint64]int{}})
	}
	lr.view = v
	if !lr.replicas.shared() {
		lr.reps = newReplicaSet(lr.replicas, len(v.workers), &f.q)
		v.active = lr.reps.views[0]
	}
}

// Route implements Router.
func (lr *LocalRouter) Route(_ context.Context, r *Request, tokens []uint32) (Decision, error) {
	v := lr.view
	if v == nil {
		return Decision{}, fmt.Errorf("sim: local router used before the fleet attached it")
	}
	var chains []decider.Chain
	for _, w := range v.workers {
		if !containsChain(chains, w.BlockSize) {
			chains = append(chains, decider.Chain{BlockSize: w.BlockSize, Hashes: chainOf(tokens, w.BlockSize)})
		}
	}
	req := &decider.Request{ID: r.ID, Model: v.workers[0].Model, PromptTokens: int64(len(tokens)), Chains: chains}
	// Requests reach the replicas round-robin; the decider reads the
	// accounting and the model of the one this request reached.
	replica := lr.turn
	lr.turn = (lr.turn + 1) % max(lr.replicas.N, 1)
	if lr.reps != nil {
		v.active = lr.reps.views[replica]
		if lr.reps.rows != nil {
			v.peers = lr.reps.rows[replica]
		}
	}
	if lr.lats != nil {
		v.lat = lr.lats[replica]
	}
	if err := lr.dc.DecideInto(&lr.dec, v, req); err != nil {
		return Decision{}, err
	}
	d := &lr.dec
	out := Decision{Mode: string(d.Mode), DecodeWorker: d.DecodeWorker, PrefillWorker: d.PrefillWorker,
		Reason: string(d.Reason), CachedTokens: d.CachedTokens, EffectiveISL: d.EffectiveISL}
	// Router-side accounting for this request.
	ent := &activeEntry{decode: v.ref(d.DecodeWorker), prefillAt: -1, replica: replica}
	dw := v.workers[ent.decode]
	ent.chain = req.Chains[chainIndex(chains, dw.BlockSize)].Hashes
	ent.extra = int64(ceilDiv(len(tokens), dw.BlockSize) - len(ent.chain))
	remote := d.Mode == decider.ModeRemote
	if remote {
		ent.prefillAt = v.ref(d.PrefillWorker)
		for i := range d.Candidates {
			if c := &d.Candidates[i]; c.Worker == d.PrefillWorker && c.Pool == decider.PoolPrefill {
				ent.prefillTok = int64(len(tokens)) - min(int64(c.OverlapBlocks*c.BlockSize), int64(len(tokens)))
			}
		}
	} else {
		ent.prefillAt, ent.prefillTok = ent.decode, d.EffectiveISL
	}
	at, decode, prefillAt, chain, extra, prefillTok := v.q.now, ent.decode, ent.prefillAt, ent.chain, ent.extra, ent.prefillTok
	lr.publishDecision(ent, func(act []workerActive, peer bool) {
		act[decode].add(lr.replicas.peerShare(chain, extra, peer))
		act[decode].noteDecided(at)
		if remote {
			act[prefillAt].noteDecided(at)
		} else {
			act[decode].noteLocal(at, prefillTok)
		}
		act[prefillAt].prefillTok += prefillTok
	})
	lr.inflight[r.ID] = ent
	lr.learnDecision(r.ID, replica, d)
	return out, nil
}

// eventTime is the simulated clock as Unix ns, the event time of the model's facts.
func (lr *LocalRouter) eventTime() int64 {
	return int64(offlineEpoch*float64(time.Second)) + int64(lr.fleet.q.now)
}

// learnDecision gives the model the decision's features, read from its rows as the
// state reads them from the record.
func (lr *LocalRouter) learnDecision(id string, replica int, d *decider.Decision) {
	var drow, prow *decider.Candidate
	for i := range d.Candidates {
		c := &d.Candidates[i]
		switch {
		case c.Pool == decider.PoolDecode && c.Worker == d.DecodeWorker:
			drow = c
		case c.Pool == decider.PoolPrefill && c.Worker == d.PrefillWorker:
			prow = c
		}
	}
	path := decider.PathLocal
	if d.Mode == decider.ModeRemote {
		path = decider.PathRemote
	}
	in := decider.PathInputs(path, d.PromptTokens, d.EffectiveISL, drow, prow)
	now := lr.eventTime()
	m := lr.model(replica)
	m.Advance(now)
	m.Decision(id, now, path, &in)
}

// model is the latency model replica learns with: its own with
// Replicas.OwnModels, else the one of every decision.
func (lr *LocalRouter) model(replica int) *latmodel.Model {
	if lr.lats != nil {
		return lr.lats[replica]
	}
	return lr.lat
}

// PrefillDone implements Router: the prefilling worker stops carrying the prompt.
func (lr *LocalRouter) PrefillDone(_ context.Context, r *Request, ttft time.Duration) {
	if ttft > 0 {
		lr.learnOutcome(r.ID, float64(ttft)/float64(time.Millisecond), -1)
	}
	if ent := lr.inflight[r.ID]; ent != nil && ent.prefillAt >= 0 {
		at, tok := ent.prefillAt, ent.prefillTok
		lr.publish(ent, func(act []workerActive, _ bool) { act[at].prefillTok -= tok })
		ent.prefillAt = -1
	}
}

// Completed implements Router: the decode worker's blocks are freed.
func (lr *LocalRouter) Completed(ctx context.Context, r *Request, outputTokens int, itl time.Duration) {
	if outputTokens >= 2 {
		lr.learnOutcome(r.ID, -1, float64(itl)/float64(time.Millisecond))
	}
	ent := lr.inflight[r.ID]
	if ent == nil {
		return
	}
	lr.PrefillDone(ctx, r, 0)
	decode, chain, extra := ent.decode, ent.chain, ent.extra
	lr.publish(ent, func(act []workerActive, peer bool) { act[decode].remove(lr.replicas.peerShare(chain, extra, peer)) })
	delete(lr.inflight, r.ID)
}

// learnOutcome gives an outcome to the model of the replica that decided
// the request (with own models, none once the request is gone).
func (lr *LocalRouter) learnOutcome(id string, ttftMs, itlMs float64) {
	m := lr.lat
	if lr.lats != nil {
		ent := lr.inflight[id]
		if ent == nil {
			return
		}
		m = lr.lats[ent.replica]
	}
	now := lr.eventTime()
	m.Advance(now)
	m.Outcome(id, now, ttftMs, itlMs)
}

// fleetView is the decider.View of the fleet.
type fleetView struct {
	engines []*Engine
	workers []decider.WorkerInfo
	active  []workerActive
	// peers: with Replicas.PeerShares, the deciding replica's rows of each peer
	// (replicaSet.rows), which Active adds to its own requests and MatchActive
	// does not see.
	peers [][]workerActive
	lat   *latmodel.Model
	q     *eventQueue // the clock of RecentLocalPrefill
}

type workerActive struct {
	blocks     map[uint64]int // chain hash → requests holding it
	distinct   int64
	extra      int64
	prefillTok int64
	requests   int64
	// recent holds the local prefills decided here, oldest first, until they leave
	// decider.RecentLocalWindow; recentTok sums them.
	recent    []localPrefill
	recentTok int64
	// decided holds the times of the decisions that named this worker (decode
	// worker, or prefill worker of a remote prefill), oldest first, until they leave
	// the same window.
	decided []simTime
}

type localPrefill struct {
	at  simTime
	tok int64
}

// noteLocal counts a local prefill decided at at. A peer's decision may arrive after
// later ones of this replica, so it goes in time order, which the window's pruning
// relies on.
func (a *workerActive) noteLocal(at simTime, tok int64) {
	i := len(a.recent)
	for i > 0 && a.recent[i-1].at > at {
		i--
	}
	a.recent = slices.Insert(a.recent, i, localPrefill{at, tok})
	a.recentTok += tok
}

// noteDecided counts a decision decided at at that named the worker, in time order
// as noteLocal does.
func (a *workerActive) noteDecided(at simTime) {
	i := len(a.decided)
	for i > 0 && a.decided[i-1] > at {
		i--
	}
	a.decided = slices.Insert(a.decided, i, at)
}

// recentLocal is the sum of the local prefills of the window ending at now.
func (a *workerActive) recentLocal(now simTime) int64 {
	n := 0
	for n < len(a.recent) && a.recent[n].at+decider.RecentLocalWindow <= now {
		a.recentTok -= a.recent[n].tok
		n++
	}
	a.recent = a.recent[n:]
	return a.recentTok
}

// recentRequests is the number of decisions that named the worker in the window
// ending at now.
func (a *workerActive) recentRequests(now simTime) int64 {
	n := 0
	for n < len(a.decided) && a.decided[n]+decider.RecentLocalWindow <= now {
		n++
	}
	a.decided = a.decided[n:]
	return int64(len(a.decided))
}

func (a *workerActive) add(chain []uint64, extra int64) {
	a.requests++
	for _, h := range chain {
		if a.blocks[h]++; a.blocks[h] == 1 {
			a.distinct++
		}
	}
	a.extra += extra
}

func (a *workerActive) remove(chain []uint64, extra int64) {
	a.requests--
	for _, h := range chain {
		if a.blocks[h]--; a.blocks[h] == 0 {
			delete(a.blocks, h)
			a.distinct--
		}
	}
	a.extra -= extra
}

func (v *fleetView) ref(id string) int {
	for i := range v.workers {
		if v.workers[i].ID == id {
			return i
		}
	}
	panic("sim: decider picked unknown worker " + id)
}

func (v *fleetView) Workers() []decider.WorkerInfo { return v.workers }

// MatchPrefix reports, like the state's index, the leading run on the GPU (Device)
// and how far the run held on the GPU or in the host tier goes beyond it (Host).
func (v *fleetView) MatchPrefix(blockSize int, chain []uint64, dst []decider.TierOverlap) {
	for i, e := range v.engines {
		if v.workers[i].BlockSize != blockSize {
			continue
		}
		dev := e.pool.Match(chain, len(chain))
		o := decider.TierOverlap{Device: dev}
		if e.host != nil {
			for n := dev; n < len(chain); n++ {
				if !e.host.Holds(chain[n]) && e.pool.Match(chain[n:n+1], 1) == 0 {
					break
				}
				o.Host++
			}
		}
		dst[i] = o
	}
}

func (v *fleetView) Load(w decider.WorkerRef) (decider.LoadSample, bool) {
	l := v.engines[w].Load()
	return decider.LoadSample{KVUsedBlocks: int64(l.UsedBlocks), ActivePrefillTokens: int64(l.PrefillTokens)}, true
}

func (v *fleetView) Active(w decider.WorkerRef) decider.ActiveLoad {
	out := v.active[w].load(v.q.now)
	for _, rows := range v.peers {
		if rows != nil {
			r := rows[w].load(v.q.now)
			out.DecodeBlocks += r.DecodeBlocks
			out.PrefillTokens += r.PrefillTokens
			out.Requests += r.Requests
			out.RecentLocalPrefill += r.RecentLocalPrefill
			out.RecentRequests += r.RecentRequests
		}
	}
	return out
}

// load is the worker's accounting as the decider reads it, at now.
func (a *workerActive) load(now simTime) decider.ActiveLoad {
	return decider.ActiveLoad{DecodeBlocks: a.distinct + a.extra, PrefillTokens: a.prefillTok, Requests: a.requests,
		RecentLocalPrefill: a.recentLocal(now), RecentRequests: a.recentRequests(now)}
}

// LatencyFit implements decider.LatencyModel: the model learned so far in this run.
func (v *fleetView) LatencyFit() *decider.LatencyFit { return v.lat.Fit() }

func (v *fleetView) MatchActive(blockSize int, chain []uint64, dst []int) {
	for i := range v.workers {
		if v.workers[i].BlockSize != blockSize {
			continue
		}
		n := 0
		for n < len(chain) && v.active[i].blocks[chain[n]] > 0 {
			n++
		}
		dst[i] = n
	}
}

func containsChain(cs []decider.Chain, bs int) bool { return chainIndex(cs, bs) >= 0 }

func chainIndex(cs []decider.Chain, bs int) int {
	for i := range cs {
		if cs[i].BlockSize == bs {
			return i
		}
	}
	return -1
}
