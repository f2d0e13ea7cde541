package statestore

import (
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/ulid"
)

// genEvent is one record to produce: its key and value (nil: tombstone).
type genEvent struct {
	key string
	msg proto.Message
}

// genWorker is what the generator remembers of a worker, to make events
// that make sense (children of stored blocks, removals of held ones).
type genWorker struct {
	id      string
	bs      int
	dp      uint32
	retired bool
	held    map[uint32][]genBlock // by rank: stored blocks
	nextEng uint64
}

type genBlock struct {
	eng   uint64
	text  string
	block int
	tier  pb.Tier
}

// generator makes a random but plausible event history: a fleet of
// workers registering, storing chains of blocks (children of their own
// stored blocks, in all tiers), evicting, clearing, resetting, sending load
// samples and health transitions; decisions and outcomes (some out of order, some without a
// decision id, some never completed, so expiry matters); and retiring
// workers with a tombstone (after which they send nothing, the ingest
// contract load.go relies on).
type generator struct {
	rng     *rand.Rand
	workers []*genWorker
	t       int64 // event time, ns
	seq     int
	open    []*pb.DecisionRecord
	texts   []string
	// ulids: decision ids are ULIDs of their decided_at, as pdrouter stamps
	// them (the latency model samples by them), not sequence numbers.
	ulids bool
}

func newGenerator(seed uint64, workers int) *generator {
	g := &generator{rng: rand.New(rand.NewPCG(seed, 99)), t: 1_000_000 * 1e9}
	for i := 0; i < workers; i++ {
		bs := 4
		if i%5 == 4 {
			bs = 8
		}
		g.workers = append(g.workers, &genWorker{id: fmt.Sprintf("w%02d", i), bs: bs, dp: uint32(1 + i%3/2), held: map[uint32][]genBlock{}, nextEng: uint64(i) << 32})
	}
	for i := 0; i < 6; i++ {
		g.texts = append(g.texts, fmt.Sprintf("T%d", i))
	}
	return g
}

func (g *generator) live() *genWorker {
	for tries := 0; tries < 20; tries++ {
		w := g.workers[g.rng.IntN(len(g.workers))]
		if !w.retired {
			return w
		}
	}
	return nil
}

func (g *generator) tier() pb.Tier {
	switch n := g.rng.IntN(10); {
	case n < 6:
		return pb.Tier_TIER_DEVICE
	case n < 8:
		return pb.Tier_TIER_HOST
	case n < 9:
		return pb.Tier_TIER_DISK
	}
	return pb.Tier_TIER_UNSPECIFIED
}

// initial registers every worker.
func (g *generator) initial() []genEvent {
	var out []genEvent
	for i, w := range g.workers {
		pool := pb.Pool_POOL_DECODE
		if i%4 == 3 {
			pool = pb.Pool_POOL_PREFILL
		}
		out = append(out, genEvent{w.id, &pb.WorkerRegistration{WorkerId: w.id, Pool: pool, Model: "m", BlockSize: uint32(w.bs), DpSize: w.dp, RegisteredAtUnixNano: g.t}})
	}
	return out
}

func (g *generator) next() genEvent {
	g.t += int64(g.rng.IntN(2000)) * 1e6
	if g.rng.IntN(200) == 0 {
		g.t += 400 * 1e9 // a quiet spell: requests expire
	}
	w := g.live()
	if w == nil {
		return genEvent{"x", &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: "x"}, SampleTimeUnixNano: g.t}}
	}
	rank := uint32(g.rng.IntN(int(w.dp)))
	ref := &pb.WorkerRef{WorkerId: w.id, DpRank: rank}
	kv := func(evs ...*pb.KvEvent) genEvent {
		return genEvent{w.id, &pb.KvEventRecord{Worker: ref, EventTimeUnixNano: g.t, Events: evs}}
	}
	switch n := g.rng.IntN(100); {
	case n < 40: // store a run of blocks: a root, or after a held block
		held := w.held[rank]
		if len(held) > 0 && g.rng.IntN(6) == 0 {
			// An offload store: held blocks copied to another tier, named by
			// engine hash only, sometimes with a hash never stored.
			tier := pb.Tier_TIER_HOST
			if g.rng.IntN(3) == 0 {
				tier = pb.Tier_TIER_DISK
			}
			var hs []uint64
			for i := 0; i < 1+g.rng.IntN(4); i++ {
				b := held[g.rng.IntN(len(held))]
				hs = append(hs, b.eng)
				w.held[rank] = append(w.held[rank], genBlock{b.eng, b.text, b.block, tier})
			}
			if g.rng.IntN(10) == 0 {
				hs = append(hs, g.rng.Uint64())
			}
			return kv(stored(tier, nil, hs, nil, w.bs*g.rng.IntN(2)))
		}
		text, first := g.texts[g.rng.IntN(len(g.texts))], 0
		var parent *uint64
		if len(held) > 0 && g.rng.IntN(3) > 0 {
			p := held[g.rng.IntN(len(held))]
			text, first = p.text, p.block+1
			parent = &p.eng
		}
		if g.rng.IntN(30) == 0 {
			parent = u64p(g.rng.Uint64()) // an unknown parent
		}
		count := 1 + g.rng.IntN(6)
		tier := g.tier()
		var hashes []uint64
		for i := 0; i < count; i++ {
			w.nextEng++
			eng := w.nextEng
			if g.rng.IntN(10) == 0 && len(held) > 0 {
				eng = held[g.rng.IntN(len(held))].eng // a re-announcement (maybe of other content)
			}
			hashes = append(hashes, eng)
			w.held[rank] = append(w.held[rank], genBlock{eng, text, first + i, tier})
		}
		return kv(stored(tier, parent, hashes, tokens(text, first, first+count-1, w.bs), w.bs))
	case n < 58: // evict some held blocks (sometimes in the wrong tier)
		held := w.held[rank]
		if len(held) == 0 {
			return kv(removed(g.tier(), g.rng.Uint64()))
		}
		var hs []uint64
		tier := held[0].tier
		for i := 0; i < 1+g.rng.IntN(4) && len(held) > 0; i++ {
			j := g.rng.IntN(len(held))
			hs = append(hs, held[j].eng)
			tier = held[j].tier
			held = append(held[:j], held[j+1:]...)
		}
		w.held[rank] = held
		if g.rng.IntN(8) == 0 {
			tier = g.tier()
		}
		return kv(removed(tier, hs...))
	case n < 60:
		w.held[rank] = nil
		if g.rng.IntN(2) == 0 {
			return kv(clearedEv())
		}
		return kv(resetEv())
	case n < 70:
		used := uint64(g.rng.IntN(1000))
		t := g.t - int64(g.rng.IntN(3))*1e9 // sometimes older than the last
		return genEvent{w.id, &pb.LoadSample{Worker: ref, SampleTimeUnixNano: t, KvUsedBlocks: &used}}
	case n < 82: // a decision
		g.seq++
		text := g.texts[g.rng.IntN(len(g.texts))]
		blocks := 1 + g.rng.IntN(8)
		p := blocks*w.bs + g.rng.IntN(w.bs)
		id := fmt.Sprintf("d%05d", g.seq)
		if g.ulids {
			id = g.ulid()
		}
		d := &pb.DecisionRecord{
			DecisionId: id, RequestId: fmt.Sprintf("q%05d", g.seq),
			Mode: "local", DecodeWorker: ref, PromptTokens: uint32(p), EffectiveIsl: uint32(p / 2),
			DecidedAtUnixNano: g.t, ReplicaId: "r0",
			Chains:     []*pb.HashChain{{BlockSize: uint32(w.bs), BlockHashes: chainOf(text, blocks-1, w.bs)}},
			Candidates: []*pb.Candidate{{Worker: ref, Pool: pb.Pool_POOL_DECODE, BlockSize: uint32(w.bs)}},
		}
		if pw := g.live(); pw != nil && g.rng.IntN(2) == 0 {
			d.Mode = "remote"
			d.PrefillWorker = &pb.WorkerRef{WorkerId: pw.id}
			d.Candidates = append(d.Candidates, &pb.Candidate{Worker: d.PrefillWorker, Pool: pb.Pool_POOL_PREFILL,
				BlockSize: uint32(pw.bs), ActivePrefillTokens: int64(g.seq % 5000)})
		}
		// Latency model features, derived from seq so that the generator's draws stay
		// what they were.
		d.Candidates[0].ActiveRequests, d.Candidates[0].ActiveDecodeBlocks = int64(g.seq%37), int64(g.seq%401)
		g.open = append(g.open, d)
		return genEvent{w.id, d}
	case n < 97: // an outcome of an open decision
		if len(g.open) == 0 {
			return kv(&pb.KvEvent{Event: &pb.KvEvent_Unknown{Unknown: &pb.UnknownEvent{Tag: "x"}}})
		}
		i := g.rng.IntN(len(g.open))
		d := g.open[i]
		o := &pb.OutcomeEvent{RequestId: d.RequestId, DecisionId: d.DecisionId, DecodeWorker: d.DecodeWorker,
			EventTimeUnixNano: g.t - int64(g.rng.IntN(5))*1e9}
		if g.rng.IntN(4) == 0 {
			o.DecisionId = ""
		}
		ttft, itl, out := float64(100+(g.seq*7919)%3000), 10+float64(g.seq%41)/4, uint64(2+g.seq%300)
		switch g.rng.IntN(3) {
		case 0:
			o.Kind = pb.OutcomeEvent_KIND_PREFILL_DONE
			o.TtftMs = &ttft
		case 1:
			o.Kind = pb.OutcomeEvent_KIND_COMPLETED
			o.ItlMsMean, o.OutputTokens = &itl, &out
			g.open = append(g.open[:i], g.open[i+1:]...)
		default:
			o.Kind = pb.OutcomeEvent_KIND_CANCELLED
			g.open = append(g.open[:i], g.open[i+1:]...)
		}
		return genEvent{d.DecodeWorker.WorkerId, o}
	case n < 98 && g.rng.IntN(10) == 0 && g.retired() < len(g.workers)/3: // retire a worker
		w.retired = true
		return genEvent{w.id, nil}
	case n == 99: // a health transition, from the draws already made
		h := &pb.WorkerHealth{WorkerId: w.id, ObservedAtUnixNano: g.t, Source: pb.HealthSource_HEALTH_SOURCE_INGEST_SCRAPE,
			Reason: pb.HealthReason_HEALTH_REASON_SCRAPE_FAILED, Detail: "connection refused", Observer: "ingest-0"}
		if g.t/1e6%3 == 0 {
			h.Healthy, h.Reason = true, pb.HealthReason_HEALTH_REASON_RECOVERED
		}
		return genEvent{w.id, h}
	}
	return kv(&pb.KvEvent{Event: &pb.KvEvent_Unknown{Unknown: &pb.UnknownEvent{Tag: "BlockInactive"}}})
}

func (g *generator) retired() int {
	n := 0
	for _, w := range g.workers {
		if w.retired {
			n++
		}
	}
	return n
}

// ulid is a ULID of the generator's clock whose random part comes from its
// rng, so that a seed gives the same ids at every run.
func (g *generator) ulid() string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	b := []byte(ulid.New(time.Unix(0, g.t)))
	for i := 10; i < ulid.Len; i++ {
		b[i] = alphabet[g.rng.IntN(len(alphabet))]
	}
	return string(b)
}

func (g *generator) events(n int) []genEvent {
	out := g.initial()
	for len(out) < n {
		out = append(out, g.next())
	}
	return out
}
