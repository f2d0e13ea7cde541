package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/pdrouter/pdrouter/events"
)

// Replicas of pdrouter share the load of each other's decisions through the log, so a
// replica sees a peer's decision, and the prefill_done and completion that follow it,
// only once the group commit, the fetch and the apply are through. Two replicas that
// decide for one worker inside that window do not see each other: both may pick the
// worker that looked idlest. WithReplicas models it in the in-process router, on
// simulated time, so that its cost in decisions can be measured against the lag
// (docs/scaling.md, "Staleness").
//
// Only the router-side active accounting lags (active blocks, prefill tokens,
// requests, recent local prefills and decisions). The engines' prefix caches and load
// samples stay exact, and the latency model is one for all replicas, fed at once
// (they have pipelines of their own, which this does not measure), unless
// Replicas.OwnModels gives each the model of its own decisions alone.

// Replicas is a set of virtual router replicas that each see their own decisions and
// lifecycle events at once and their peers' Lag of simulated time later. Requests
// reach them round-robin, in arrival order.
type Replicas struct {
	// N is the number of replicas (0 or 1: one router).
	N int
	// Lag is how late a replica sees its peers' effects (0: at once, one shared view).
	Lag time.Duration
	// PeerHashes is how many leading hashes of a peer's chain a replica sees, as a
	// load delta carries them (the writer cuts each chain, and the blocks past the
	// cut count as blocks without a hash); 0: the whole chain.
	PeerHashes int
	// PeerShares has a replica see its peers' load as the rows of their snapshots
	// (serve --load-deltas snapshots): per peer and worker, the peer's own requests
	// counted as that peer counts them, blocks deduplicated by hash within the peer's
	// requests but not across peers, and no peer's hashes for active-prefix matching.
	PeerShares bool
	// OwnModels gives each replica a latency model of its own, fed with the
	// decisions it made and their outcomes only, as a replica of serve
	// --load-deltas snapshots learns; otherwise one model learns every decision.
	OwnModels bool
}

// MaxReplicas bounds Replicas.N: each replica keeps its own view of every worker.
const MaxReplicas = 64

// MaxReplicaLag bounds Replicas.Lag. Beyond decider.RecentLocalWindow (30 s) a peer's
// decision would never count among a worker's recent ones; 10 s is already 200 times
// the materializer's fetch wait.
const MaxReplicaLag = 10 * time.Second

// Validate checks the bounds, naming the flags of `pdrouter sim` that set them. (A
// zero Replicas is valid where it means one router: in a Policy, or to WithReplicas.)
func (r Replicas) Validate() error {
	if r.N < 1 || r.N > MaxReplicas {
		return fmt.Errorf("--replicas %d: want 1 to %d router replicas", r.N, MaxReplicas)
	}
	if r.Lag < 0 || r.Lag > MaxReplicaLag {
		return fmt.Errorf("--replica-lag %s: want 0 to %s of simulated time", r.Lag, MaxReplicaLag)
	}
	if r.PeerHashes < 0 || r.PeerHashes > events.MaxDeltaHashes {
		return fmt.Errorf("--replica-hashes %d: want 0 (the whole chain) to %d, the most a load delta carries", r.PeerHashes, events.MaxDeltaHashes)
	}
	if r.PeerShares && r.PeerHashes > 0 {
		return fmt.Errorf("--replica-shares with --replica-hashes %d: a snapshot carries no hashes to cut", r.PeerHashes)
	}
	if r.PeerShares && r.shared() {
		return errors.New("--replica-shares: needs --replicas above 1 and a --replica-lag above 0, or no replica sees a peer's load")
	}
	if r.OwnModels && r.N <= 1 {
		return errors.New("--replica-models: needs --replicas above 1, or the one replica's model is every decision's")
	}
	if r.PeerHashes > 0 && r.shared() {
		// One shared view has no peers: the cut would change nothing, silently.
		return fmt.Errorf("--replica-hashes %d: needs --replicas above 1 and a --replica-lag above 0, or no replica sees a peer's chain", r.PeerHashes)
	}
	return nil
}

// shared reports whether every replica sees every effect at once: then they hold the
// same accounting, which is one router's, and the runs are one router's byte for byte.
func (r Replicas) shared() bool { return r.N <= 1 || r.Lag == 0 }

// String is "8 replicas, 50ms lag", or "1 replica", with ", peers' chains cut to 32
// hashes" when they are.
func (r Replicas) String() string {
	if r.N <= 1 {
		return "1 replica"
	}
	return fmt.Sprintf("%d replicas, %s lag%s", r.N, r.Lag, r.cutNote())
}

// cutNote is ", peers' chains cut to K hashes" when they are, ", peers' load as
// shares" when it is, else "", then ", a latency model each" when they have.
func (r Replicas) cutNote() string {
	note := ""
	switch {
	case r.PeerShares:
		note = ", peers' load as shares"
	case r.PeerHashes > 0:
		note = fmt.Sprintf(", peers' chains cut to %d hashes", r.PeerHashes)
	}
	if r.OwnModels {
		note += ", a latency model each"
	}
	return note
}

// peerShare is the chain and the blocks without a hash that a replica counts for a
// request: a peer's chain cut to PeerHashes, the rest of its blocks without a hash.
func (r Replicas) peerShare(chain []uint64, extra int64, peer bool) ([]uint64, int64) {
	if !peer || r.PeerHashes == 0 || len(chain) <= r.PeerHashes {
		return chain, extra
	}
	return chain[:r.PeerHashes], extra + int64(len(chain)-r.PeerHashes)
}

// WithReplicas makes the router r.N replicas that see each other r.Lag late. With one
// replica or no lag the router is the one router it is by default.
func WithReplicas(r Replicas) LocalRouterOption {
	return func(lr *LocalRouter) {
		lr.replicas = r
		if lr.replicas.N == 0 {
			lr.replicas.N = 1
		}
	}
}

// Races is the number of decisions made on a decode worker while a peer's decision for
// the same worker was not visible yet to the replica that decided: the decisions
// pdrouter_active_decision_races_total counts on the live path. 0 with one view.
func (lr *LocalRouter) Races() int64 {
	if lr.reps == nil {
		return 0
	}
	return lr.reps.races
}

// Replicas is the router's replica set.
func (lr *LocalRouter) Replicas() Replicas { return lr.replicas }

// replicaSet is the accounting of each replica.
type replicaSet struct {
	lag   time.Duration
	q     *eventQueue
	views [][]workerActive // views[replica][worker]
	// rows[replica][writer][worker]: with PeerShares, what the replica holds of each
	// peer's load, kept apart from its own requests (views) and from the other peers'.
	// rows[r][r] stays empty.
	rows [][][]workerActive
	// blind[replica][worker] counts the peers' decisions naming worker as decode
	// worker that the replica does not see yet.
	blind [][]int
	races int64
}

func newReplicaSet(r Replicas, workers int, q *eventQueue) *replicaSet {
	rs := &replicaSet{lag: r.Lag, q: q, views: make([][]workerActive, r.N), blind: make([][]int, r.N)}
	for i := range rs.views {
		rs.views[i] = make([]workerActive, workers)
		for w := range rs.views[i] {
			rs.views[i][w].blocks = map[uint64]int{}
		}
		rs.blind[i] = make([]int, workers)
	}
	if r.PeerShares {
		rs.rows = make([][][]workerActive, r.N)
		for i := range rs.rows {
			rs.rows[i] = make([][]workerActive, r.N)
			for w := range rs.rows[i] {
				rs.rows[i][w] = make([]workerActive, workers)
				for k := range rs.rows[i][w] {
					rs.rows[i][w][k].blocks = map[uint64]int{}
				}
			}
		}
	}
	return rs
}

// peerView is where a peer's effects land in replica i's accounting: its rows of
// writer owner with PeerShares, else its one view.
func (rs *replicaSet) peerView(i, owner int) []workerActive {
	if rs.rows != nil {
		return rs.rows[i][owner]
	}
	return rs.views[i]
}

// publish applies an effect of ent's decision to the accounting: at once to the
// replica that decided (or to the one shared view), and rs.lag later to its peers;
// apply learns which (peer).
// The effects of one request reach a peer in the order they happened, since they are
// all late by the same lag and the event queue keeps the order of equal times.
func (lr *LocalRouter) publish(ent *activeEntry, apply func(act []workerActive, peer bool)) {
	if lr.reps == nil {
		apply(lr.view.active, false)
		return
	}
	lr.reps.publish(ent.replica, apply, nil)
}

// publishDecision is publish for the decision itself, which also counts whether it
// raced a peer's decision on its decode worker, and keeps its peers blind to the
// worker until it reaches them.
func (lr *LocalRouter) publishDecision(ent *activeEntry, apply func(act []workerActive, peer bool)) {
	rs := lr.reps
	if rs == nil {
		apply(lr.view.active, false)
		return
	}
	decode := ent.decode
	if rs.blind[ent.replica][decode] > 0 {
		rs.races++
	}
	for i := range rs.blind {
		if i != ent.replica {
			rs.blind[i][decode]++
		}
	}
	rs.publish(ent.replica, apply, func(peer int) { rs.blind[peer][decode]-- })
}

// publish applies to the owner's view at once and to each peer's lag later, then
// calls seen (when not nil) with the peer.
func (rs *replicaSet) publish(owner int, apply func(act []workerActive, peer bool), seen func(peer int)) {
	apply(rs.views[owner], false)
	rs.q.after(rs.lag, func() {
		for i := range rs.views {
			if i == owner {
				continue
			}
			apply(rs.peerView(i, owner), true)
			if seen != nil {
				seen(i)
			}
		}
	})
}
