package sim

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/latmodel"
)

// twoApart is two requests with nothing in common, the second gap after the first.
func twoApart(gap time.Duration) *Workload {
	w := &Workload{Name: "two"}
	for i := range 2 {
		w.Requests = append(w.Requests, &Request{ID: fmt.Sprintf("r%d", i), Arrival: time.Duration(i) * gap,
			Prompt: []Segment{{Seed: uint64(100 + i), Len: 1024}}, PromptLen: 1024, OutputLen: 64, Output: uint64(200 + i)})
	}
	return w
}

// decodeWorkers runs w on two decode workers with the router's replicas and returns
// each request's decode worker and the races counted.
func decodeWorkers(t *testing.T, w *Workload, r Replicas) ([]string, int64) {
	t.Helper()
	p, _ := PolicyByName("aggregated")
	lr, err := NewLocalRouter(p.Config, false, WithReplicas(r))
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFleet(FleetConfig{Prefill: 0, Decode: 2, Seed: 1}, lr, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := f.Run(context.Background(), w, "two")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != len(w.Requests) {
		t.Fatalf("%d of %d completed:\n%s", rep.Completed, len(w.Requests), rep)
	}
	var out []string
	for _, res := range f.results {
		out = append(out, res.dec.DecodeWorker)
	}
	return out, lr.Races()
}

// TestReplicasBlindPickSameWorker: two requests 1 ms apart on an idle fleet of two
// decode workers. One router (or replicas that see each other at once) counts the
// first on its worker and sends the second to the other one; two replicas 10 ms apart
// do not see the first decision and both pick the worker that looks idlest, the same
// one: a race. Once the lag has passed, they see each other again.
func TestReplicasBlindPickSameWorker(t *testing.T) {
	cases := []struct {
		name  string
		gap   time.Duration
		r     Replicas
		same  bool
		races int64
	}{
		{"one router", time.Millisecond, Replicas{N: 1}, false, 0},
		{"one replica, lag", time.Millisecond, Replicas{N: 1, Lag: 10 * time.Millisecond}, false, 0},
		{"two replicas, no lag", time.Millisecond, Replicas{N: 2}, false, 0},
		{"two replicas, blind", time.Millisecond, Replicas{N: 2, Lag: 10 * time.Millisecond}, true, 1},
		{"two replicas, after the lag", 20 * time.Millisecond, Replicas{N: 2, Lag: 10 * time.Millisecond}, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws, races := decodeWorkers(t, twoApart(c.gap), c.r)
			if same := ws[0] == ws[1]; same != c.same || races != c.races {
				t.Errorf("decode workers %v (same: want %v), races %d (want %d)", ws, c.same, races, c.races)
			}
		})
	}
}

// TestReplicasOneViewUnchanged: one replica, whatever its lag, and any number of
// replicas without lag, run exactly as the one router did: the same report, byte for
// byte (but for the replicas line that several replicas print), for a policy that
// reads the load (cond-slo) and a static one.
func TestReplicasOneViewUnchanged(t *testing.T) {
	w := synthetic40s(t)
	for _, name := range []string{"cond-slo", "cond-isl_or_load"} {
		p, err := PolicyByName(name)
		if err != nil {
			t.Fatal(err)
		}
		base, err := RunOffline(context.Background(), DefaultFleet(), w, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []Replicas{{N: 1, Lag: 50 * time.Millisecond}, {N: 1, Lag: MaxReplicaLag}, {N: 8}, {N: MaxReplicas}} {
			p.Replicas = r
			rep, err := RunOffline(context.Background(), DefaultFleet(), w, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Races != 0 {
				t.Errorf("%s, %s: %d races with one view", name, r, rep.Races)
			}
			got := rep.String()
			if r.N > 1 {
				want := fmt.Sprintf("replicas     %d, each seeing the others' decisions and outcomes 0s late; 0 decisions raced a peer's on their decode worker\n", r.N)
				if !strings.Contains(got, want) {
					t.Errorf("%s, %s: no line %q in\n%s", name, r, want, got)
				}
				got = strings.Replace(got, want, "", 1)
			}
			if got != base.String() {
				t.Errorf("%s, %s differs from one router:\n%s\nwant\n%s", name, r, got, base)
			}
			rep.Replicas = base.Replicas
			if !reflect.DeepEqual(rep, base) {
				t.Errorf("%s, %s: reports differ beyond their text", name, r)
			}
		}
	}
}

// TestReplicasLagCosts: on a workload busy enough to put requests of different
// replicas inside one lag, a lag changes decisions and counts races, deterministically,
// and once every request is done every replica's accounting is back to empty (each
// peer got every decision and every lifecycle event, in order).
func TestReplicasLagCosts(t *testing.T) {
	w := synthetic40s(t).Scale(4)
	p, err := PolicyByName("cond-slo")
	if err != nil {
		t.Fatal(err)
	}
	base, err := RunOffline(context.Background(), DefaultFleet(), w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Replicas = Replicas{N: 4, Lag: 200 * time.Millisecond}
	var reps [2]*Report
	for i := range reps {
		lr, err := NewLocalRouter(p.Config, false, WithReplicas(p.Replicas))
		if err != nil {
			t.Fatal(err)
		}
		f, err := NewFleet(DefaultFleet(), lr, nil)
		if err != nil {
			t.Fatal(err)
		}
		if reps[i], err = f.Run(context.Background(), w, p.Name); err != nil {
			t.Fatal(err)
		}
		reps[i].Races = lr.Races()
		for r, view := range lr.reps.views {
			for wi, a := range view {
				if a.distinct != 0 || a.extra != 0 || a.prefillTok != 0 || a.requests != 0 || len(a.blocks) != 0 || lr.reps.blind[r][wi] != 0 {
					t.Errorf("replica %d, worker %d after the run: %+v, blind %d", r, wi, a, lr.reps.blind[r][wi])
				}
			}
		}
	}
	if !reflect.DeepEqual(reps[0], reps[1]) {
		t.Fatalf("two runs differ:\n%s\n%s", reps[0], reps[1])
	}
	got := reps[0]
	if got.Races == 0 || got.Completed != base.Completed {
		t.Errorf("want races and every request done (%d):\n%s", base.Completed, got)
	}
	if reflect.DeepEqual(got.Fates, base.Fates) {
		t.Errorf("4 replicas 200 ms apart decided as one router did")
	}
	t.Logf("one router:\n%s\n4 replicas, 200 ms:\n%s", base, got)
}

// TestRecentInTimeOrder: a peer's decision arrives after later ones of the replica;
// it is kept in time order, so that the window drops it when its own time leaves.
func TestRecentInTimeOrder(t *testing.T) {
	var a workerActive
	for _, at := range []simTime{10, 30, 20} {
		a.noteDecided(at * time.Second)
		a.noteLocal(at*time.Second, int64(at))
	}
	if got := a.recentRequests(45 * time.Second); got != 2 {
		t.Errorf("recent requests at 45 s: %d, want 2 (20 s and 30 s)", got)
	}
	if got := a.recentLocal(45 * time.Second); got != 50 {
		t.Errorf("recent local prefill at 45 s: %d tokens, want 50", got)
	}
}

// TestReplicasBurstsRace: requests stamped at one instant reach 8 replicas at once,
// and every one after the first in a tick on a worker already picked races; spread
// over the 3 s between ticks, only those that happen to arrive within the 50 ms lag
// of each other can.
func TestReplicasBurstsRace(t *testing.T) {
	w := &Workload{Name: "ticks"}
	for i := range 32 {
		w.Requests = append(w.Requests, &Request{ID: fmt.Sprint(i), Arrival: time.Duration(i/8) * 3 * time.Second,
			Prompt: []Segment{{Seed: uint64(i + 1), Len: 512}}, PromptLen: 512, OutputLen: 16, Output: uint64(1000 + i)})
	}
	p, err := PolicyByName("cond-slo")
	if err != nil {
		t.Fatal(err)
	}
	p.Replicas = Replicas{N: 8, Lag: 50 * time.Millisecond}
	burst, err := RunOffline(context.Background(), DefaultFleet(), w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	spread, err := RunOffline(context.Background(), DefaultFleet(), w.Spread(3*time.Second, 1), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Of 8 decisions in a tick on D decode workers, all but the first on each race.
	d := DefaultFleet().Decode
	if want := int64(4 * (8 - d)); burst.Races < want || spread.Races > burst.Races/3 {
		t.Errorf("races: %d in ticks of 8 on %d decode workers (want ≥ %d), %d spread (want at most a third)", burst.Races, d, want, spread.Races)
	}
	t.Logf("races: %d in ticks, %d spread", burst.Races, spread.Races)
}

// synthetic40s is 40 s of the synthetic workload.
func synthetic40s(t *testing.T) *Workload {
	t.Helper()
	sc := DefaultSynthetic()
	sc.Duration = 40 * time.Second
	w, err := Synthetic(sc)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestReplicasPeerHashes: a replica counts a peer's chain cut to PeerHashes and the
// blocks past the cut without a hash, so the request's blocks are the same whatever
// the cut; its own requests, and every request with no cut, keep the whole chain.
func TestReplicasPeerHashes(t *testing.T) {
	chain := make([]uint64, 40)
	for i := range chain {
		chain[i] = uint64(i + 1)
	}
	for _, c := range []struct {
		name      string
		r         Replicas
		peer      bool
		hashes    int
		extra     int64
		validates bool
	}{
		{"a peer's, cut", Replicas{N: 8, Lag: time.Millisecond, PeerHashes: 32}, true, 32, 3 + 8, true},
		{"its own, whole", Replicas{N: 8, Lag: time.Millisecond, PeerHashes: 32}, false, 40, 3, true},
		{"no cut", Replicas{N: 8, Lag: time.Millisecond}, true, 40, 3, true},
		{"a cut past the chain", Replicas{N: 8, Lag: time.Millisecond, PeerHashes: 64}, true, 40, 3, true},
		{"past a delta's bound", Replicas{N: 8, PeerHashes: 257}, true, 40, 3, false},
		{"negative", Replicas{N: 8, PeerHashes: -1}, true, 40, 3, false},
		{"no lag: no peer to cut", Replicas{N: 8, PeerHashes: 32}, true, 40, 3, false},
		{"one replica: no peer to cut", Replicas{N: 1, Lag: time.Millisecond, PeerHashes: 32}, true, 40, 3, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.r.Validate(); (err == nil) != c.validates {
				t.Fatalf("Validate: %v, want valid %v", err, c.validates)
			}
			if !c.validates {
				return
			}
			got, extra := c.r.peerShare(chain, 3, c.peer)
			if len(got) != c.hashes || extra != c.extra || !reflect.DeepEqual(got, chain[:c.hashes]) {
				t.Fatalf("peerShare: %d hashes and %d without a hash, want %d and %d", len(got), extra, c.hashes, c.extra)
			}
			if int64(len(got))+extra != int64(len(chain))+3 {
				t.Fatalf("the request's blocks changed with the cut: %d", int64(len(got))+extra)
			}
		})
	}
}

// TestReplicasPeerShares: with PeerShares a replica counts each peer's requests as
// that peer counts them, so two peers' requests with one prefix on one worker count
// the prefix twice (once per peer), where a replica that sees the peers' chains
// counts it once; its own requests still share their blocks, and active-prefix
// matching sees its own chains only.
func TestReplicasPeerShares(t *testing.T) {
	prefix := []uint64{1, 2, 3, 4}
	chainOf := func(tail uint64) []uint64 { return append(slices.Clone(prefix), tail) }
	for _, c := range []struct {
		name        string
		r           Replicas
		peersBlocks int64 // replica 2's blocks on worker 0 after replicas 0 and 1 decided there
		ownBlocks   int64 // the same after replica 2 decided there too, on the same prefix
		peersMatch  int   // replica 2's active match of the prefix before its own request
	}{
		{"chains", Replicas{N: 3, Lag: time.Millisecond}, 4 + 2, 4 + 3, 4},
		{"shares", Replicas{N: 3, Lag: time.Millisecond, PeerShares: true}, 2 * 5, 2*5 + 5, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.r.Validate(); err != nil {
				t.Fatal(err)
			}
			q := &eventQueue{}
			rs := newReplicaSet(c.r, 2, q)
			add := func(owner int, chain []uint64) {
				rs.publish(owner, func(act []workerActive, _ bool) { act[0].add(chain, 0) }, nil)
				for {
					e, ok := q.pop()
					if !ok {
						break
					}
					e.fn()
				}
			}
			v := &fleetView{workers: []decider.WorkerInfo{{ID: "d0", BlockSize: 16}, {ID: "d1", BlockSize: 16}}, q: q,
				active: rs.views[2]}
			if rs.rows != nil {
				v.peers = rs.rows[2]
			}
			add(0, chainOf(10))
			add(1, chainOf(11))
			if got := v.Active(0).DecodeBlocks; got != c.peersBlocks {
				t.Errorf("after two peers' requests: %d blocks, want %d", got, c.peersBlocks)
			}
			if got := v.Active(0).Requests; got != 2 {
				t.Errorf("after two peers' requests: %d requests, want 2", got)
			}
			match := make([]int, 2)
			v.MatchActive(16, prefix, match)
			if match[0] != c.peersMatch {
				t.Errorf("active match of the peers' prefix: %d blocks, want %d", match[0], c.peersMatch)
			}
			add(2, chainOf(12))
			if got := v.Active(0).DecodeBlocks; got != c.ownBlocks {
				t.Errorf("after its own request: %d blocks, want %d", got, c.ownBlocks)
			}
			v.MatchActive(16, prefix, match)
			if match[0] != 4 {
				t.Errorf("active match of its own prefix: %d blocks, want 4", match[0])
			}
		})
	}
}

// TestReplicasOwnModels: with Replicas.OwnModels each replica's latency model
// learns the decisions it made and their outcomes only: two requests that reach
// two replicas give each model half of what the one model of every decision
// learns.
func TestReplicasOwnModels(t *testing.T) {
	samples := func(r Replicas) []int64 {
		p, _ := PolicyByName("cond-slo")
		lr, err := NewLocalRouter(p.Config, false, WithReplicas(r))
		if err != nil {
			t.Fatal(err)
		}
		f, err := NewFleet(FleetConfig{Prefill: 1, Decode: 2, Seed: 1}, lr, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := f.Run(context.Background(), twoApart(time.Second), "two"); err != nil || rep.Completed != 2 {
			t.Fatalf("%v: %v", rep, err)
		}
		var out []int64
		for _, m := range append([]*latmodel.Model{lr.lat}, lr.lats...) {
			out = append(out, m.Stats().Samples)
		}
		return out
	}
	for _, lag := range []time.Duration{0, 10 * time.Millisecond} {
		one := samples(Replicas{N: 2, Lag: lag})
		own := samples(Replicas{N: 2, Lag: lag, OwnModels: true})
		if one[0] == 0 || own[0] != 0 || len(own) != 3 || own[1] != one[0]/2 || own[2] != one[0]/2 {
			t.Fatalf("lag %s: samples learned: one model %v, own models (the unused shared one first) %v; want half each", lag, one, own)
		}
	}
}
