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

// The active index agrees with a plain map model under random adds and
// removes: refcounts, new/gone pairs, holder bitsets and MatchActive.
func TestActiveIndexAgreesWithModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var x activeIndex
	type pair struct {
		h    uint64
		slot int32
	}
	model := map[pair]int{}
	const slots = 150
	hashes := make([]uint64, 300)
	for i := range hashes {
		hashes[i] = rng.Uint64() >> rng.IntN(64) // small ones (and 0) too
	}
	hashes[0] = 0
	for step := 0; step < 200_000; step++ {
		h, slot := hashes[rng.IntN(len(hashes))], int32(rng.IntN(slots))
		if rng.IntN(2) == 0 {
			model[pair{h, slot}]++
			if got, want := x.add(h, slot), model[pair{h, slot}] == 1; got != want {
				t.Fatalf("step %d: add(%x, %d) new=%v, want %v", step, h, slot, got, want)
			}
		} else if model[pair{h, slot}] > 0 {
			model[pair{h, slot}]--
			if got, want := x.remove(h, slot), model[pair{h, slot}] == 0; got != want {
				t.Fatalf("step %d: remove(%x, %d) gone=%v, want %v", step, h, slot, got, want)
			}
			if model[pair{h, slot}] == 0 {
				delete(model, pair{h, slot})
			}
		}
		if step%5000 != 0 {
			continue
		}
		distinct := map[uint64]bool{}
		for p := range model {
			distinct[p.h] = true
		}
		if x.len() != len(distinct) {
			t.Fatalf("step %d: %d distinct hashes, model %d", step, x.len(), len(distinct))
		}
		for _, h := range hashes {
			v, ok := x.shard(h).get(h)
			for s := int32(0); s < slots; s++ {
				held := ok && x.word(v, int(s)/64)&(1<<(uint(s)%64)) != 0
				if held != (model[pair{h, s}] > 0) {
					t.Fatalf("step %d: hash %x slot %d held=%v, model %d", step, h, s, held, model[pair{h, s}])
				}
			}
		}
		// MatchActive on a random chain of the hashes.
		chain := make([]uint64, 1+rng.IntN(100))
		for i := range chain {
			chain[i] = hashes[rng.IntN(8)] // few: long runs
		}
		live := make([]uint64, (slots+63)/64)
		for s := 0; s < slots; s++ {
			live[s/64] |= 1 << (uint(s) % 64)
		}
		got := make([]int, slots)
		x.matchActive(chain, live, func(slot int32, n int) { got[slot] = n })
		for s := int32(0); s < slots; s++ {
			want := 0
			for want < len(chain) && model[pair{chain[want], s}] > 0 {
				want++
			}
			if got[s] != want {
				t.Fatalf("step %d: slot %d active run %d, model %d", step, s, got[s], want)
			}
		}
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
		testHookBeforeCommit = func() { applied = h.s.st.dec.pending[id] }
		h.apply(r)
		testHookBeforeCommit = nil
		if applied == nil {
			t.Fatalf("%s: not applied", id)
		}
		if (applied == d) != same {
			t.Fatalf("%s: the log copy is the local record: %v, want %v", id, applied == d, same)
		}
		got, ok := h.s.Decision(id)
		if !ok || got.GetDecisionId() != id {
			t.Fatalf("%s: not found after read-back", id)
		}
	}
}
