package statestore

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/kvhash"
)

// harness drives a Store with records built in memory: every test of the
// apply rules goes through Store.Apply, the path the materializer uses.
type harness struct {
	t     testing.TB
	dir   string
	opts  Options
	s     *Store
	reg   *prometheus.Registry
	log   []*kgo.Record // every record applied, in order
	next  map[topicPartition]int64
	parts int32 // partitions per topic (records of one key share one)
	clock int64 // Kafka timestamps, ms
}

func newHarness(t testing.TB, parts int32) *harness {
	t.Helper()
	h := &harness{t: t, dir: filepath.Join(t.TempDir(), "store"), next: map[topicPartition]int64{}, parts: parts, clock: 1_700_000_000_000}
	h.open()
	t.Cleanup(func() {
		if h.s != nil {
			_ = h.s.Close()
		}
	})
	return h
}

func (h *harness) open() {
	h.t.Helper()
	h.reg = prometheus.NewRegistry()
	o := h.opts
	o.Registerer = h.reg
	if o.Records == nil {
		o.Records = harnessLog{h}
	}
	s, err := Open(h.dir, o)
	if err != nil {
		h.t.Fatal(err)
	}
	h.s = s
}

func (h *harness) reopen() {
	h.t.Helper()
	if err := h.s.Close(); err != nil {
		h.t.Fatal(err)
	}
	h.open()
}

func partitionOf(key []byte, parts int32) int32 {
	f := fnv.New32a()
	_, _ = f.Write(key)
	return int32(f.Sum32() % uint32(parts))
}

// record frames m like a producer would, with the next offset of its
// partition (chosen by key).
func (h *harness) record(key string, m proto.Message) *kgo.Record {
	h.t.Helper()
	var r *kgo.Record
	if m == nil {
		r = events.NewTombstone(events.Names{}, key)
	} else {
		var err error
		r, err = events.NewRecord(events.Names{}, []byte(key), m)
		if err != nil {
			h.t.Fatal(err)
		}
	}
	t, _ := events.Names{}.Logical(r.Topic)
	return h.place(t, r)
}

// place gives r the partition its key chooses, the next offset of that
// partition and the next log time, as a broker would.
func (h *harness) place(t events.Topic, r *kgo.Record) *kgo.Record {
	r.Partition = partitionOf(r.Key, h.parts)
	tp := topicPartition{t, r.Partition}
	r.Offset = h.next[tp]
	h.next[tp]++
	h.clock++
	r.Timestamp = time.UnixMilli(h.clock)
	return r
}

func (h *harness) apply(recs ...*kgo.Record) {
	h.t.Helper()
	h.log = append(h.log, recs...)
	if err := h.s.Apply(recs); err != nil {
		h.t.Fatal(err)
	}
}

// harnessLog reads the records the harness applied by position, as
// events/logread reads them from a broker: the store's RecordReader at Open.
type harnessLog struct{ h *harness }

func (l harnessLog) Read(_ context.Context, topic string, partition int32, offset int64) (*kgo.Record, error) {
	for _, r := range l.h.log {
		if r.Topic == topic && r.Partition == partition && r.Offset == offset {
			return r, nil
		}
	}
	return nil, fmt.Errorf("no record at %s/%d@%d", topic, partition, offset)
}

func (h *harness) put(key string, m proto.Message) { h.apply(h.record(key, m)) }

func (h *harness) digest() Digest {
	h.t.Helper()
	d, err := h.s.Digest()
	if err != nil {
		h.t.Fatal(err)
	}
	return d
}

// replayDigest replays log like replayStore and returns the digest.
func replayDigest(t testing.TB, log []*kgo.Record, rng *rand.Rand, o Options) Digest {
	t.Helper()
	s := replayStore(t, log, rng, o)
	d, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close() // not at cleanup: a test replays many times
	return d
}

// replayStore applies log to a fresh store, interleaving partitions in an
// order drawn from rng (each partition's own order is kept, as Kafka
// guarantees), in batches of random size, and returns the open store
// (closed at the end of the test).
func replayStore(t testing.TB, log []*kgo.Record, rng *rand.Rand, o Options) *Store {
	t.Helper()
	byTP := map[string][]*kgo.Record{}
	var keys []string
	for _, r := range log {
		k := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
		if _, ok := byTP[k]; !ok {
			keys = append(keys, k)
		}
		byTP[k] = append(byTP[k], r)
	}
	slices.Sort(keys)
	o.Registerer = prometheus.NewRegistry()
	s, err := Open(filepath.Join(t.TempDir(), "replay"), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for len(keys) > 0 {
		var batch []*kgo.Record
		for n := 1 + rng.IntN(4); n > 0 && len(keys) > 0; n-- {
			i := rng.IntN(len(keys))
			k := keys[i]
			take := min(1+rng.IntN(20), len(byTP[k]))
			batch = append(batch, byTP[k][:take]...)
			byTP[k] = byTP[k][take:]
			if len(byTP[k]) == 0 {
				keys = append(keys[:i], keys[i+1:]...)
			}
		}
		if err := s.Apply(batch); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// tokens returns the token ids of blocks [from, to] of a named text, for
// a block size: block i of text X always has the same tokens, so texts
// sharing a name share a prefix.
func tokens(text string, from, to, bs int) []uint32 {
	f := fnv.New32a()
	_, _ = f.Write([]byte(text))
	base := f.Sum32() % 1_000_000
	var out []uint32
	for i := from; i <= to; i++ {
		for j := 0; j < bs; j++ {
			out = append(out, base+uint32(i*bs+j))
		}
	}
	return out
}

// chainOf is the router chain of blocks [0, to] of a text.
func chainOf(text string, to, bs int) []uint64 {
	return kvhash.Chain(nil, tokens(text, 0, to, bs), bs, 0, false)
}

func kvRec(worker string, rank uint32, at int64, evs ...*pb.KvEvent) *pb.KvEventRecord {
	return &pb.KvEventRecord{Worker: &pb.WorkerRef{WorkerId: worker, DpRank: rank}, EventTimeUnixNano: at, Events: evs}
}

func stored(tier pb.Tier, parent *uint64, hashes []uint64, toks []uint32, bs int) *pb.KvEvent {
	return &pb.KvEvent{Event: &pb.KvEvent_Stored{Stored: &pb.BlockStored{
		BlockHashes: hashes, ParentBlockHash: parent, TokenIds: toks, BlockSize: uint32(bs), Tier: tier}}}
}

func removed(tier pb.Tier, hashes ...uint64) *pb.KvEvent {
	return &pb.KvEvent{Event: &pb.KvEvent_Removed{Removed: &pb.BlockRemoved{BlockHashes: hashes, Tier: tier}}}
}

func clearedEv() *pb.KvEvent {
	return &pb.KvEvent{Event: &pb.KvEvent_Cleared{Cleared: &pb.AllBlocksCleared{}}}
}

func resetEv() *pb.KvEvent {
	return &pb.KvEvent{Event: &pb.KvEvent_SourceReset{SourceReset: &pb.SourceReset{Reason: pb.SourceReset_REASON_SEQUENCE_RESTART}}}
}

func u64p(v uint64) *uint64 { return &v }

func registration(id string, pool pb.Pool, bs, dp uint32) *pb.WorkerRegistration {
	return &pb.WorkerRegistration{WorkerId: id, Pool: pool, Model: "m", BlockSize: bs, DpSize: dp}
}

// dumpKeys lists a store's keyspace, for diffing two stores in a failure.
func dumpKeys(t testing.TB, s *Store) map[string]string {
	out := map[string]string{}
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		out[fmt.Sprintf("%q", it.Key())] = fmt.Sprintf("%x", it.Value())
	}
	return out
}

func diffKeys(a, b map[string]string) []string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			d = append(d, "only in first: "+k+" = "+v)
		} else if w != v {
			d = append(d, "differs: "+k+" = "+v+" vs "+w)
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			d = append(d, "only in second: "+k+" = "+v)
		}
	}
	slices.Sort(d)
	return d
}

// newHarnessWith is newHarness with store options.
func newHarnessWith(t testing.TB, parts int32, o Options) *harness {
	t.Helper()
	h := newHarness(t, parts)
	h.opts = o
	h.reopen()
	return h
}

// openMaterializer opens a store in a temporary directory and a
// materializer reading brokers into it; both close when the test ends.
func openMaterializer(t *testing.T, brokers []string, o Options) (*Store, *Materializer) {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "s"), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	m, err := NewMaterializer(s, MaterializerOptions{Client: []kgo.Opt{kgo.SeedBrokers(brokers...)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return s, m
}
