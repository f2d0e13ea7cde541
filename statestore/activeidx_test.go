package statestore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// TestActiveIndexAgreesWithModel drives the trie with random requests
// (chains that share prefixes of a few base chains, end anywhere and branch
// anywhere, some repeated on one slot) added and removed in random order,
// and checks it against a model that keeps the multiset of chains per slot:
// the new and gone pair counts, every slot's distinct blocks (a block is a
// chain prefix), MatchActive on random chains, and that the trie shrinks
// back to nothing.
func TestActiveIndexAgreesWithModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	const slots = 150
	base := make([][]uint64, 4)
	for i := range base {
		base[i] = make([]uint64, 60)
		for j := range base[i] {
			base[i][j] = rng.Uint64() >> rng.IntN(64) // small ones (and 0) too
		}
	}
	// randomChain: a prefix of a base chain, then maybe a branch of its own.
	randomChain := func() []uint64 {
		b := base[rng.IntN(len(base))]
		c := slices.Clone(b[:rng.IntN(len(b)+1)])
		if rng.IntN(2) == 0 {
			for range rng.IntN(20) {
				c = append(c, rng.Uint64())
			}
		}
		return c
	}
	// A block is a chain prefix; the model names prefix i of a chain by a
	// running hash of its first i+1 hashes (prefixIDs).
	type req struct {
		chain, ids []uint64
		slot       int32
	}
	prefixIDs := func(c []uint64) []uint64 {
		ids := make([]uint64, len(c))
		id := uint64(0x9e3779b97f4a7c15)
		for i, h := range c {
			id = (id^h)*0xff51afd7ed558ccd + uint64(i)
			id ^= id >> 29
			ids[i] = id
		}
		return ids
	}
	var x activeIndex
	var live []req
	distinct := func(slot int32) map[uint64]bool {
		out := map[uint64]bool{}
		for _, r := range live {
			if r.slot == slot {
				for _, id := range r.ids {
					out[id] = true
				}
			}
		}
		return out
	}
	carried := make([]int64, slots) // the trie's count, summed from its answers
	for step := 0; step < 20_000; step++ {
		if len(live) == 0 || rng.IntN(2) == 0 {
			c := randomChain()
			r := req{c, prefixIDs(c), int32(rng.IntN(slots))}
			if rng.IntN(4) == 0 && len(live) > 0 { // the same chain again, same slot
				r = live[rng.IntN(len(live))]
			}
			before := len(distinct(r.slot))
			live = append(live, r)
			got, want := x.addChain(r.chain, r.slot), int64(len(distinct(r.slot))-before)
			if got != want {
				t.Fatalf("step %d: addChain(len %d, slot %d) = %d new, model %d", step, len(r.chain), r.slot, got, want)
			}
			carried[r.slot] += got
		} else {
			i := rng.IntN(len(live))
			r := live[i]
			before := len(distinct(r.slot))
			live = slices.Delete(live, i, i+1)
			got, want := x.removeChain(r.chain, r.slot), int64(before-len(distinct(r.slot)))
			if got != want {
				t.Fatalf("step %d: removeChain(len %d, slot %d) = %d gone, model %d", step, len(r.chain), r.slot, got, want)
			}
			carried[r.slot] -= got
		}
		if step%500 != 0 {
			continue
		}
		for s := int32(0); s < slots; s++ {
			if want := int64(len(distinct(s))); carried[s] != want {
				t.Fatalf("step %d: slot %d carries %d blocks, model %d", step, s, carried[s], want)
			}
		}
		query := randomChain()
		qids := prefixIDs(query)
		live := make([]uint64, (slots+63)/64)
		for s := 0; s < slots; s++ {
			live[s/64] |= 1 << (uint(s) % 64)
		}
		got := make([]int, slots)
		calls := 0
		x.matchActive(query, live, func(slot int32, n int) { got[slot] = n; calls++ })
		if calls != slots {
			t.Fatalf("step %d: MatchActive reported %d slots, want every one of %d", step, calls, slots)
		}
		for s := int32(0); s < slots; s++ {
			held := distinct(s)
			want := 0
			for want < len(query) && held[qids[want]] {
				want++
			}
			if got[s] != want {
				t.Fatalf("step %d: slot %d active run %d, model %d", step, s, got[s], want)
			}
		}
	}
	for _, r := range live {
		x.removeChain(r.chain, r.slot)
	}
	if x.blocks != 0 || x.nodes != 0 || len(x.root.kids) != 0 {
		t.Fatalf("all removed, yet the trie keeps %d blocks in %d nodes", x.blocks, x.nodes)
	}
}

// TestActiveIndexMergesFinishedSplits: a request ending inside another's
// run splits it; once it is gone the run is one node again, so paths do
// not fragment over time.
func TestActiveIndexMergesFinishedSplits(t *testing.T) {
	var x activeIndex
	long := []uint64{1, 2, 3, 4, 5, 6}
	x.addChain(long, 0)
	if x.nodes != 1 {
		t.Fatalf("one chain: %d nodes", x.nodes)
	}
	x.addChain(long[:3], 1)
	x.addChain(append(slices.Clone(long[:2]), 9), 0)
	if x.nodes != 4 || x.blocks != 7 {
		t.Fatalf("after two splits and a branch: %d nodes, %d blocks; want 4 and 7", x.nodes, x.blocks)
	}
	x.removeChain(long[:3], 1)
	x.removeChain([]uint64{1, 2, 9}, 0)
	if x.nodes != 1 || x.blocks != 6 || len(x.root.kids[1].label) != 6 {
		t.Fatalf("after the short requests ended: %d nodes, %d blocks; want one node of 6", x.nodes, x.blocks)
	}
}

// activeAnswers renders what the decider sees of active accounting: every
// worker's active load and its active run of a few chains.
func activeAnswers(s *Store, chains [][]uint64) []string {
	var out []string
	s.Read(func(v View) {
		ws := v.Workers()
		for ref, w := range ws {
			out = append(out, fmt.Sprintf("%s %+v", w.ID, v.Active(decider.WorkerRef(ref))))
		}
		for _, c := range chains {
			dst := make([]int, len(ws))
			v.MatchActive(4, c, dst)
			out = append(out, fmt.Sprint(dst))
		}
	})
	return out
}

// A replica's own decisions, counted at once and then read back from the
// log (with outcomes, duplicates and expiries in between), leave exactly
// the aggregates of a replica that only read the log: the local share is
// handed over or removed, never counted twice.
func TestLocalDecisionsReadBackAgreeWithReplay(t *testing.T) {
	for _, at := range []bool{false, true} {
		t.Run(fmt.Sprintf("at=%v", at), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 5))
			h := newHarnessWith(t, 2, Options{ChunkRecords: 7})
			var regs []*kgo.Record
			for i := 0; i < 6; i++ {
				id := fmt.Sprintf("d%d", i)
				regs = append(regs, h.record(id, registration(id, pb.Pool_POOL_DECODE, 4, 0)))
			}
			regs = append(regs, h.record("p0", registration("p0", pb.Pool_POOL_PREFILL, 4, 0)))
			h.apply(regs...)
			texts := []string{"A", "B", "C", "D"}
			var queries [][]uint64
			for _, x := range texts {
				queries = append(queries, chainOf(x, 30, 4))
			}
			now := int64(1e12)
			// queue holds the records written and not applied yet, in log
			// order (Apply keeps each partition's order).
			var queue []*kgo.Record
			flush := func(n int) {
				for _, r := range queue[:n] {
					h.apply(r)
					if rng.IntN(10) == 0 {
						h.apply(r) // a re-delivery: skipped
					}
				}
				queue = queue[n:]
			}
			for i := 0; i < 400; i++ {
				now += int64(rng.IntN(3)) * 1e9
				text := texts[rng.IntN(len(texts))]
				d := decision(fmt.Sprintf("x%03d", i), fmt.Sprintf("q%03d", i%350), fmt.Sprintf("d%d", rng.IntN(6)), now)
				d.PromptTokens = uint32(4 * (1 + rng.IntN(30)))
				d.Chains[0].BlockHashes = chainOf(text, int(d.PromptTokens/4)-1, 4)
				if rng.IntN(2) == 0 {
					d.Mode, d.PrefillWorker = "remote", &pb.WorkerRef{WorkerId: "p0"}
				}
				r := h.record(d.GetDecodeWorker().GetWorkerId(), d)
				queue = append(queue, r)
				switch rng.IntN(4) {
				case 0: // another replica's decision
					continue
				case 1: // read back before it is recorded locally
					flush(len(queue))
				}
				var err error
				if at {
					v := r.Value
					if rng.IntN(3) == 0 {
						v = nil // the bytes are optional
					}
					err = h.s.RecordLocalDecisionAt(d, v, r.Partition, r.Offset)
				} else {
					err = h.s.RecordLocalDecision(d)
				}
				if err != nil {
					t.Fatal(err)
				}
				if rng.IntN(5) == 0 {
					o := &pb.OutcomeEvent{RequestId: d.GetRequestId(), Kind: pb.OutcomeEvent_KIND_PREFILL_DONE, EventTimeUnixNano: now}
					if rng.IntN(2) == 0 {
						o.Kind = pb.OutcomeEvent_KIND_COMPLETED
					}
					if rng.IntN(2) == 0 {
						o.DecisionId = d.GetDecisionId()
					}
					queue = append(queue, h.record(d.GetDecodeWorker().GetWorkerId(), o))
				}
				if rng.IntN(6) == 0 {
					flush(rng.IntN(len(queue) + 1))
				}
			}
			flush(len(queue))
			if n := len(h.s.st.act.local); n != 0 {
				t.Fatalf("%d local decisions left after read-back", n)
			}
			got := activeAnswers(h.s, queries)
			replay := replayStore(t, h.log, rand.New(rand.NewPCG(9, 9)), h.opts)
			want := activeAnswers(replay, queries)
			if !slices.Equal(got, want) {
				t.Fatalf("after read-back:\n%v\nreplay of the log:\n%v", got, want)
			}
			if h.digest().Hash != replayDigest(t, h.log, rand.New(rand.NewPCG(1, 1)), h.opts).Hash {
				t.Fatal("digest differs from a replay's")
			}
		})
	}
}

// A local decision read back with the bytes that were appended is taken
// as is (not decoded again); other bytes under the same id are decoded.
func TestOwnDecisionReadBackWithoutDecoding(t *testing.T) {
	h := newHarness(t, 1)
	h.put("d1", registration("d1", pb.Pool_POOL_DECODE, 4, 0))
	for _, same := range []bool{true, false} {
		id := fmt.Sprintf("own-%v", same)
		d := decision(id, "q-"+id, "d1", 1e12)
		r := h.record("d1", d)
		v := r.Value
		if !same {
			v = append([]byte(nil), v...)
			v[len(v)-1] ^= 1 // not the bytes on the log
		}
		if err := h.s.RecordLocalDecisionAt(d, v, r.Partition, r.Offset); err != nil {
			t.Fatal(err)
		}
		var applied *pb.DecisionRecord
		testHookBeforeCommit = func() { applied = h.s.st.dec.pending[id].sd.Record }
		h.apply(r)
		testHookBeforeCommit = nil
		if applied == nil {
			t.Fatalf("%s: not applied", id)
		}
		if (applied == d) != same {
			t.Fatalf("%s: the log copy is the local record: %v, want %v", id, applied == d, same)
		}
		got, ok := h.s.Decision(id)
		if !ok || got.Record.GetDecisionId() != id {
			t.Fatalf("%s: not found after read-back", id)
		}
	}
	// Announced before its append, the log copy applied before the API
	// records it: recognized by its bytes all the same; and the
	// announcement ends when the API records it (which then finds the copy
	// applied and records nothing).
	d := decision("own-early", "q-early", "d1", 1e12)
	r := h.record("d1", d)
	h.s.ExpectLocalDecision(d, r.Value)
	var applied *pb.DecisionRecord
	testHookBeforeCommit = func() { applied = h.s.st.dec.pending["own-early"].sd.Record }
	h.apply(r)
	testHookBeforeCommit = nil
	if applied != d {
		t.Fatal("an announced decision applied before it was recorded was decoded again")
	}
	if err := h.s.RecordLocalDecisionAt(d, r.Value, r.Partition, r.Offset); err != nil {
		t.Fatal(err)
	}
	if n := len(h.s.expecting.m); n != 0 || len(h.s.st.dec.local) != 0 {
		t.Fatalf("after RecordLocalDecisionAt: %d announced, %d local decisions left", n, len(h.s.st.dec.local))
	}
	// Recording without a position, or a record that fails validation,
	// ends the announcement too: none outlives its decision.
	late := decision("own-late", "q-late", "d1", 1e12)
	bad := decision("own-bad", "q-bad", "d1", 1e12)
	bad.DecodeWorker = nil
	h.s.ExpectLocalDecision(late, []byte("v1"))
	h.s.ExpectLocalDecision(bad, []byte("v2"))
	if err := h.s.RecordLocalDecision(late); err != nil {
		t.Fatal(err)
	}
	if err := h.s.RecordLocalDecisionAt(bad, nil, 0, 99); err == nil {
		t.Fatal("a decision without a decode worker was recorded")
	}
	if n := len(h.s.expecting.m); n != 0 {
		t.Fatalf("%d announcements outlived their decisions", n)
	}
}
