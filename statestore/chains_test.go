package statestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/logread"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// chainDecisions are n decisions of 64-block chains over 4 decode workers
// and 2 prefill workers, half of them remote, and the registrations.
func chainDecisions(n int) (regs []*pb.WorkerRegistration, ds []*pb.DecisionRecord) {
	for i := range 4 {
		regs = append(regs, registration(fmt.Sprintf("d%d", i), pb.Pool_POOL_DECODE, 16, 1))
	}
	for i := range 2 {
		regs = append(regs, registration(fmt.Sprintf("p%d", i), pb.Pool_POOL_PREFILL, 16, 1))
	}
	for i := range n {
		dw := &pb.WorkerRef{WorkerId: fmt.Sprintf("d%d", i%4)}
		d := &pb.DecisionRecord{DecisionId: fmt.Sprintf("dec-%03d", i), RequestId: fmt.Sprintf("req-%03d", i),
			DecodeWorker: dw, Mode: "local", BlockSize: 16, PromptTokens: 64*16 + 5, EffectiveIsl: 100,
			DecidedAtUnixNano: int64(1000+i) * 1e9}
		d.Candidates = append(d.Candidates, &pb.Candidate{Worker: dw, Pool: pb.Pool_POOL_DECODE, BlockSize: 16})
		if i%2 == 1 {
			d.Mode = "remote"
			d.PrefillWorker = &pb.WorkerRef{WorkerId: fmt.Sprintf("p%d", i%2)}
			d.Candidates = append(d.Candidates, &pb.Candidate{Worker: d.PrefillWorker, Pool: pb.Pool_POOL_PREFILL, BlockSize: 16, OverlapBlocks: 3})
		}
		// Three prompts, so that workers share chains.
		d.Chains = []*pb.HashChain{{BlockSize: 16, BlockHashes: chainOf(fmt.Sprintf("T%d", i%3), 63, 16)}}
		ds = append(ds, d)
	}
	return regs, ds
}

// activeLoads is each worker's active load as readers see it.
func activeLoads(s *Store) string {
	var b bytes.Buffer
	s.Read(func(v View) {
		for i, w := range v.Workers() {
			fmt.Fprintf(&b, "%s %+v\n", w.ID, v.Active(i))
		}
	})
	return b.String()
}

// activeRuns is the active run of every chain of ds on every worker.
func activeRuns(s *Store, ds []*pb.DecisionRecord) string {
	var b bytes.Buffer
	s.Read(func(v View) {
		dst := make([]int, len(v.Workers()))
		for _, d := range ds {
			v.MatchActive(16, d.GetChains()[0].GetBlockHashes(), dst)
			fmt.Fprintf(&b, "%s %v\n", d.GetDecisionId(), dst)
		}
	})
	return b.String()
}

// The keyspace holds no active request's chain: each entry names it by
// length and position (chains.go).
func TestActiveChainsNotStored(t *testing.T) {
	h := newHarness(t, 4)
	regs, ds := chainDecisions(8)
	for _, r := range regs {
		h.put(r.GetWorkerId(), r)
	}
	for _, d := range ds {
		h.put(d.GetDecodeWorker().GetWorkerId(), d)
	}
	n := 0
	for k, v := range dumpKeys(t, h.s) {
		if k[1] != famActive { // k is quoted, v in hex
			continue
		}
		n++
		if len(v)/2 > 128 {
			t.Errorf("active entry %s is %d bytes: it holds more than its facts", k, len(v)/2)
		}
		for _, d := range ds {
			if h := d.GetChains()[0].GetBlockHashes(); strings.Contains(v, hex.EncodeToString(binary.LittleEndian.AppendUint64(nil, h[len(h)-1]))) {
				t.Errorf("active entry %s holds the chain of %s", k, d.GetDecisionId())
			}
		}
	}
	if n != len(ds) {
		t.Fatalf("%d active entries, want %d", n, len(ds))
	}
}

// failingLog is a decisions topic that answers nothing.
type failingLog struct{}

func (failingLog) Read(context.Context, string, int32, int64) (*kgo.Record, error) {
	return nil, errors.New("broker unreachable")
}

// At Open the chains of the requests in flight are read back from the log,
// so readers see what they saw before the close; without the log they are
// lost: the blocks still count, without their hashes, until the request
// ends, and the keyspace is the same either way.
func TestActiveChainsReadBackAtOpen(t *testing.T) {
	h := newHarness(t, 4)
	regs, ds := chainDecisions(12)
	for _, r := range regs {
		h.put(r.GetWorkerId(), r)
	}
	for _, d := range ds {
		h.put(d.GetDecodeWorker().GetWorkerId(), d)
	}
	// Two requests end before the close: their chains are not read back.
	for _, d := range ds[:2] {
		h.put(d.GetDecodeWorker().GetWorkerId(), &pb.OutcomeEvent{RequestId: d.GetRequestId(), DecisionId: d.GetDecisionId(),
			Kind: pb.OutcomeEvent_KIND_COMPLETED, EventTimeUnixNano: 1100e9})
	}
	loads, runs, digest := activeLoads(h.s), activeRuns(h.s, ds), h.digest()
	if !bytes.Contains([]byte(runs), []byte(" 64")) {
		t.Fatalf("no request's whole chain is active before the close:\n%s", runs)
	}
	chainBytes := testutil.ToFloat64(h.s.met.chainBytes)
	if want := float64(10 * 64 * 8); chainBytes != want {
		t.Fatalf("pdrouter_statestore_active_chain_bytes %v, want %v", chainBytes, want)
	}

	h.reopen()
	if got := activeLoads(h.s) + activeRuns(h.s, ds); got != loads+runs {
		t.Fatalf("after reopen:\n%s\nbefore:\n%s", got, loads+runs)
	}
	if got := testutil.ToFloat64(h.s.met.chainsRead.WithLabelValues(chainRecovered)); got != 10 {
		t.Fatalf("%v chains read back, want 10", got)
	}
	if got := testutil.ToFloat64(h.s.met.chainBytes); got != chainBytes {
		t.Fatalf("pdrouter_statestore_active_chain_bytes %v after reopen, want %v", got, chainBytes)
	}
	if d := h.digest(); d.Hash != digest.Hash {
		t.Fatalf("digest %s after reopen, want %s", d, digest)
	}

	// Without the log: the same loads, no active runs.
	h.opts.Records = failingLog{}
	h.reopen()
	if got := testutil.ToFloat64(h.s.met.chainsRead.WithLabelValues(chainLost)); got != 10 {
		t.Fatalf("%v chains lost, want 10", got)
	}
	if got := activeLoads(h.s); got != loads {
		t.Fatalf("loads with lost chains:\n%s\nwant:\n%s", got, loads)
	}
	if got := activeRuns(h.s, ds); bytes.Contains([]byte(got), []byte("64")) {
		t.Fatalf("lost chains still match:\n%s", got)
	}
	if d := h.digest(); d.Hash != digest.Hash {
		t.Fatalf("digest %s with lost chains, want %s", d, digest)
	}

	// Requests end, lost chain or not: the accounting returns to zero, and
	// the keyspace is that of a store that never closed.
	for _, d := range ds[2:] {
		h.put(d.GetDecodeWorker().GetWorkerId(), &pb.OutcomeEvent{RequestId: d.GetRequestId(), DecisionId: d.GetDecisionId(),
			Kind: pb.OutcomeEvent_KIND_COMPLETED, EventTimeUnixNano: 1200e9})
	}
	h.s.Read(func(v View) {
		for i := range v.Workers() {
			if a := v.Active(i); a.DecodeBlocks != 0 || a.Requests != 0 {
				t.Errorf("worker %d still active after every request ended: %+v", i, a)
			}
		}
	})
	if got := testutil.ToFloat64(h.s.met.chainBytes); got != 0 {
		t.Fatalf("pdrouter_statestore_active_chain_bytes %v after every request ended", got)
	}
	want := replayDigest(t, h.log, rand.New(rand.NewPCG(1, 2)), Options{})
	if d := h.digest(); d.Hash != want.Hash {
		t.Fatalf("digest %s, a store that never closed %s", d, want)
	}
}

// Against a broker (kfake, and the real one with PDR_TEST_BROKERS): a
// replica that materialized decisions from the log and restarts reads its
// requests' chains back from the decisions topic (events/logread), and
// sees what it saw before.
func TestActiveChainsReadBackFromKafka(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		kafkatest.Migrate(t, brokers, prefix)
		regs, ds := chainDecisions(40)
		var evs []genEvent
		for _, r := range regs {
			evs = append(evs, genEvent{r.GetWorkerId(), r})
		}
		for _, d := range ds {
			evs = append(evs, genEvent{d.GetDecodeWorker().GetWorkerId(), d})
		}
		produce(t, brokers, prefix, evs)
		dir := filepath.Join(t.TempDir(), "store")
		r := openReplica(t, dir, brokers, prefix)
		digest := r.catchUp(t)
		loads, runs := activeLoads(r.s), activeRuns(r.s, ds)
		r.close()

		s, err := Open(dir, Options{Names: events.Names{Prefix: prefix}, Registerer: prometheus.NewRegistry(),
			Records: logread.New(kafkatest.Client(t, brokers))})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got := testutil.ToFloat64(s.met.chainsRead.WithLabelValues(chainRecovered)); got != float64(len(ds)) {
			t.Fatalf("%v chains read back, want %d (lost %v)", got, len(ds), testutil.ToFloat64(s.met.chainsRead.WithLabelValues(chainLost)))
		}
		if got := activeLoads(s) + activeRuns(s, ds); got != loads+runs {
			t.Fatalf("after reopen:\n%s\nbefore:\n%s", got, loads+runs)
		}
		if d := mustDigest(t, s); d.Hash != digest.Hash {
			t.Fatalf("digest %s after reopen, want %s", d, digest)
		}
	})
}

// A record delivered twice, on two partitions: the entry names the lower
// position whichever copy was read first, so replicas that read the
// partitions in other orders store the same entry. (The decision key 'd'
// stores the position of the copy applied last, another rule: only the
// active entry is checked here.)
func TestActiveChainPositionIndependentOfOrder(t *testing.T) {
	regs, ds := chainDecisions(1)
	var entries []string
	for _, order := range [][2]int32{{1, 3}, {3, 1}} {
		h := newHarness(t, 4)
		for _, r := range regs {
			h.put(r.GetWorkerId(), r)
		}
		for _, p := range order {
			r, err := events.NewRecord(events.Names{}, []byte("k"), ds[0])
			if err != nil {
				t.Fatal(err)
			}
			h.place(events.TopicDecisions, r)
			r.Partition, r.Offset = p, int64(p)
			h.apply(r)
		}
		entries = append(entries, dumpKeys(t, h.s)[fmt.Sprintf("%q", activeKey("d"+ds[0].GetDecisionId()))])
		h.reopen()
		if got := testutil.ToFloat64(h.s.met.chainsRead.WithLabelValues(chainRecovered)); got != 1 {
			t.Fatalf("order %v: %v chains read back, want 1", order, got)
		}
	}
	if entries[0] == "" || entries[0] != entries[1] {
		t.Fatalf("the same records in two orders: active entries %q and %q", entries[0], entries[1])
	}
}

// An entry's value round-trips its facts, its chain as a length and a
// position; a value that is cut, has bytes after it, or declares a chain
// longer than a record can hold is refused.
func TestActiveEntryEncoding(t *testing.T) {
	e := &reqEntry{id: "dx", flags: fDecision | fHasPrefill, tD: 5, requestID: "r", decodeID: "d0", decodeRank: 1,
		prefillID: "p0", extra: 1, prefillTok: 7, chain: []uint64{1, 2, 3}, partition: 4, offset: 1 << 40}
	v := encodeEntry(nil, e)
	got, err := decodeEntry("dx", v)
	if err != nil {
		t.Fatal(err)
	}
	if got.lost != 3 || got.chain != nil || got.partition != 4 || got.offset != 1<<40 || got.prefillTok != 7 || got.decodeRank != 1 {
		t.Fatalf("decoded %+v", got)
	}
	if again := encodeEntry(nil, got); !bytes.Equal(again, v) {
		t.Fatalf("a decoded entry encodes to %x, stored %x", again, v)
	}
	huge := *e
	huge.chain, huge.lost = nil, maxChainLen+1
	for name, bad := range map[string][]byte{
		"cut":        v[:len(v)-1],
		"trailing":   append(slices.Clone(v), 0),
		"huge chain": encodeEntry(nil, &huge),
		"old format": append([]byte{1}, v[1:]...),
	} {
		if _, err := decodeEntry("dx", bad); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}
