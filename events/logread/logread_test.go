package logread_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events/logread"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// createTopic creates topic with the given partitions, keeping records
// forever as kafkatest.Migrate does (tests stamp records with old times), and
// deletes it when the test ends.
func createTopic(t testing.TB, brokers []string, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	all := map[string]*string{"retention.ms": kadm.StringPtr("-1")}
	for k, v := range configs {
		all[k] = v
	}
	cl := kafkatest.Client(t, brokers)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		// Right after a delete, a real broker answers
		// TOPIC_ALREADY_EXISTS until it has removed the old topic.
		resp, err := adm.CreateTopic(ctx, partitions, 1, all, topic)
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			break
		}
		if !errors.Is(err, kerr.TopicAlreadyExists) || ctx.Err() != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() { deleteTopic(t, brokers, topic) })
	kafkatest.WaitTopics(t, cl, topic)
}

// deleteTopic deletes topic with a client of its own, so it also works in a
// cleanup that runs after the test's clients are closed.
func deleteTopic(t testing.TB, brokers []string, topic string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Logf("delete topic %s: %v", topic, err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).DeleteTopic(ctx, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Logf("delete topic %s: %v", topic, err)
	}
}

// produce writes recs synchronously and fails the test on any error. The
// records come back with their partition and offset set.
func produce(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	return recs
}

// producer returns a client that writes to the partition each record names.
func producer(t testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	return kafkatest.Client(t, brokers, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
}

// variedRecords returns n records for topic spread over partitions, with
// keys, values and headers of varied sizes, from empty and null to 30 KB,
// some compressible and some not, so that the reader sees batches of every
// shape.
func variedRecords(topic string, partitions int32, n int) []*kgo.Record {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 17, 300, 1000, 4096, 30 * 1024}
	out := make([]*kgo.Record, n)
	for i := range out {
		size := sizes[i%len(sizes)]
		value := make([]byte, size)
		if i%2 == 0 {
			for j := range value {
				value[j] = byte(rng.Uint32())
			}
		} else {
			for j := range value {
				value[j] = "decision "[j%9]
			}
		}
		r := &kgo.Record{
			Topic:     topic,
			Partition: int32(i) % partitions,
			Key:       fmt.Appendf(nil, "decision-%03d", i),
			Value:     value,
			Timestamp: time.UnixMilli(1_780_000_000_000 + int64(i)),
		}
		switch i % 7 {
		case 3:
			r.Value = nil // a tombstone: null, not empty
		case 5:
			r.Key = nil
		}
		for h := range i % 4 {
			hv := make([]byte, rng.IntN(64))
			for j := range hv {
				hv[j] = byte(rng.Uint32())
			}
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: fmt.Sprintf("h%d", h), Value: hv})
		}
		out[i] = r
	}
	return out
}

// sameRecord reports how got differs from the produced record want, or ""
// if it does not: position, timestamp, and key, value and headers byte for
// byte, telling null from empty.
func sameRecord(got, want *kgo.Record) string {
	var d []string
	if got.Topic != want.Topic || got.Partition != want.Partition || got.Offset != want.Offset {
		d = append(d, fmt.Sprintf("position %s[%d]@%d, want %s[%d]@%d", got.Topic, got.Partition, got.Offset, want.Topic, want.Partition, want.Offset))
	}
	if !got.Timestamp.Equal(want.Timestamp) {
		d = append(d, fmt.Sprintf("timestamp %v, want %v", got.Timestamp, want.Timestamp))
	}
	same := func(a, b []byte) bool { return bytes.Equal(a, b) && (a == nil) == (b == nil) }
	if !same(got.Key, want.Key) {
		d = append(d, fmt.Sprintf("key %q, want %q", got.Key, want.Key))
	}
	if !same(got.Value, want.Value) {
		d = append(d, fmt.Sprintf("value of %d bytes (null %v), want %d (null %v)", len(got.Value), got.Value == nil, len(want.Value), want.Value == nil))
	}
	if len(got.Headers) != len(want.Headers) {
		d = append(d, fmt.Sprintf("%d headers, want %d", len(got.Headers), len(want.Headers)))
	} else {
		for i, h := range got.Headers {
			if h.Key != want.Headers[i].Key || !bytes.Equal(h.Value, want.Headers[i].Value) {
				d = append(d, fmt.Sprintf("header %d is %q=%x, want %q=%x", i, h.Key, h.Value, want.Headers[i].Key, want.Headers[i].Value))
			}
		}
	}
	return strings.Join(d, "; ")
}

func readCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestReadEveryRecord produces 50 records of varied sizes over 3 partitions
// with three compression codecs and reads each back by its position.
func TestReadEveryRecord(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		topic := kafkatest.Prefix(t) + "decisions"
		createTopic(t, brokers, topic, 3, nil)
		recs := variedRecords(topic, 3, 50)
		codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.SnappyCompression(), kgo.ZstdCompression()}
		for i, codec := range codecs {
			var part []*kgo.Record
			for j := i; j < len(recs); j += len(codecs) {
				part = append(part, recs[j])
			}
			produce(t, producer(t, brokers, kgo.ProducerBatchCompression(codec)), part...)
		}

		rd := logread.New(kafkatest.Client(t, brokers))
		ctx := readCtx(t)
		for i, want := range recs {
			got, err := rd.Read(ctx, want.Topic, want.Partition, want.Offset)
			if err != nil {
				t.Errorf("record %d: %v", i, err)
				continue
			}
			if d := sameRecord(got, want); d != "" {
				t.Errorf("record %d at [%d]@%d: %s", i, want.Partition, want.Offset, d)
			}
		}
	})
}

// TestReadConcurrent reads every record from several goroutines at once
// through one Reader, each in its own order, to catch shared state (run
// with -race).
func TestReadConcurrent(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		topic := kafkatest.Prefix(t) + "decisions"
		createTopic(t, brokers, topic, 3, nil)
		recs := produce(t, producer(t, brokers), variedRecords(topic, 3, 30)...)

		rd := logread.New(kafkatest.Client(t, brokers))
		ctx := readCtx(t)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for _, i := range rng.Perm(len(recs)) {
					want := recs[i]
					got, err := rd.Read(ctx, want.Topic, want.Partition, want.Offset)
					if err != nil {
						t.Errorf("goroutine %d, record %d: %v", g, i, err)
						return
					}
					if d := sameRecord(got, want); d != "" {
						t.Errorf("goroutine %d, record %d: %s", g, i, d)
						return
					}
				}
			})
		}
		wg.Wait()
	})
}

// TestReadMiddleOfBatch writes records in one batch and reads one from its
// middle: the broker returns the whole batch from its first offset, and the
// Reader must pick the record asked for, not the batch's first.
func TestReadMiddleOfBatch(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		topic := kafkatest.Prefix(t) + "decisions"
		createTopic(t, brokers, topic, 3, nil)
		var mu sync.Mutex
		var batches []int // records per batch written to partition 1
		hook := batchHook(func(partition int32, n int) {
			if partition == 1 {
				mu.Lock()
				batches = append(batches, n)
				mu.Unlock()
			}
		})
		cl := producer(t, brokers, kgo.WithHooks(hook))
		// written waits until the hook has seen n records since the
		// last call (it may run just after the records' promises) and
		// returns the batch sizes it saw.
		written := func(n int) []int {
			t.Helper()
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				mu.Lock()
				got, seen := slices.Clone(batches), 0
				for _, b := range got {
					seen += b
				}
				if seen >= n {
					batches = nil
				}
				mu.Unlock()
				if seen >= n {
					return got
				}
				if time.Now().After(deadline) {
					t.Fatalf("the produce hook saw batches %v, want %d records", got, n)
				}
			}
		}
		// A record before the batch, so it does not start at offset 0.
		produce(t, cl, &kgo.Record{Topic: topic, Partition: 1, Value: []byte("before")})
		written(1)
		recs := make([]*kgo.Record, 21)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Partition: 1, Key: fmt.Appendf(nil, "k%d", i), Value: bytes.Repeat([]byte{byte('a' + i)}, 100+i)}
		}
		produce(t, cl, recs...)
		got := written(len(recs))
		if len(got) != 1 || got[0] != len(recs) {
			t.Fatalf("the %d records were written in batches of %v, want one batch: the test needs a batch to read the middle of", len(recs), got)
		}

		rd := logread.New(kafkatest.Client(t, brokers))
		ctx := readCtx(t)
		for _, i := range []int{10, 1, len(recs) - 1, 0} {
			want := recs[i]
			rec, err := rd.Read(ctx, topic, 1, want.Offset)
			if err != nil {
				t.Fatalf("record %d of the batch: %v", i, err)
			}
			if d := sameRecord(rec, want); d != "" {
				t.Errorf("record %d of the batch: %s", i, d)
			}
		}
	})
}

// batchHook calls its function for every batch a producer writes.
type batchHook func(partition int32, records int)

func (h batchHook) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, partition int32, m kgo.ProduceBatchMetrics) {
	h(partition, m.NumRecords)
}

// TestReadErrors covers positions that hold no record and bad input: each
// must fail with the right sentinel (or none) and name the position.
func TestReadErrors(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		topic := prefix + "decisions"
		createTopic(t, brokers, topic, 3, nil)
		recs := produce(t, producer(t, brokers), variedRecords(topic, 3, 9)...)
		var hw int64 // the end offset of partition 0
		for _, r := range recs {
			if r.Partition == 0 {
				hw = max(hw, r.Offset+1)
			}
		}
		if hw != 3 {
			t.Fatalf("partition 0 ends at %d, want 3", hw)
		}
		unknown := prefix + "no-such-topic"

		rd := logread.New(kafkatest.Client(t, brokers))
		for _, tc := range []struct {
			name      string
			topic     string
			partition int32
			offset    int64
			want      error    // a sentinel the error must wrap, or nil for none of them
			contains  []string // parts of the message besides the position
		}{
			{"at the high watermark", topic, 0, hw, logread.ErrNotYet, []string{"high watermark 3"}},
			{"past the high watermark", topic, 0, hw + 1000, logread.ErrNotYet, []string{"high watermark 3"}},
			{"at another partition's high watermark", topic, 2, 3, logread.ErrNotYet, []string{"high watermark 3"}},
			{"negative offset", topic, 0, -1, nil, []string{"negative offset -1"}},
			{"negative partition", topic, -2, 0, nil, []string{"negative partition -2"}},
			{"empty topic", "", 0, 0, nil, []string{"empty topic name"}},
			{"unknown topic", unknown, 0, 0, kerr.UnknownTopicOrPartition, []string{"topic " + unknown}},
			{"partition out of range", topic, 3, 0, nil, []string{"has 3 partitions"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				rec, err := rd.Read(readCtx(t), tc.topic, tc.partition, tc.offset)
				if err == nil {
					t.Fatalf("read returned record %s[%d]@%d, want an error", rec.Topic, rec.Partition, rec.Offset)
				}
				t.Logf("error: %v", err)
				for _, s := range []error{logread.ErrGone, logread.ErrNotYet, logread.ErrNoRecord, kerr.UnknownTopicOrPartition} {
					if is, want := errors.Is(err, s), s == tc.want; is != want {
						t.Errorf("errors.Is(err, %q) = %v, want %v", s, is, want)
					}
				}
				pos := fmt.Sprintf("logread: %s[%d]@%d: ", tc.topic, tc.partition, tc.offset)
				if !strings.HasPrefix(err.Error(), pos) {
					t.Errorf("error does not begin with the position %q", pos)
				}
				for _, s := range tc.contains {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error does not say %q", s)
					}
				}
			})
		}

		// Reading an unknown topic must not create it, whatever the
		// broker's auto-creation setting.
		td, err := kadm.NewClient(kafkatest.Client(t, brokers)).ListTopics(readCtx(t), unknown)
		if err != nil {
			t.Fatal(err)
		}
		if td.Has(unknown) {
			t.Errorf("reading %s created it", unknown)
		}
	})
}

// TestReadBadInputAtOnce checks that bad input fails before any request: the
// client's only broker does not answer, so a request would fail differently
// or hang until the context ends.
func TestReadBadInputAtOnce(t *testing.T) {
	rd := unreachable(t)
	for _, tc := range []struct {
		topic     string
		partition int32
		offset    int64
		want      string
	}{
		{"", 0, 0, "logread: [0]@0: empty topic name"},
		{"d", -1, 5, "logread: d[-1]@5: negative partition -1"},
		{"d", 2, -7, "logread: d[2]@-7: negative offset -7"},
	} {
		call := fmt.Sprintf("Read(%q, %d, %d)", tc.topic, tc.partition, tc.offset)
		err := atOnce(t, call, func(ctx context.Context) error {
			_, err := rd.Read(ctx, tc.topic, tc.partition, tc.offset)
			return err
		})
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s = %v, want %q", call, err, tc.want)
		}
	}
}

// atOnce returns the error of call, run with a context of 5 s, and fails
// the test when call took long enough to have sent a request.
func atOnce(t *testing.T, what string, call func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	err := call(ctx)
	if d := time.Since(start); d > time.Second {
		t.Errorf("%s took %v: it should not have sent a request", what, d)
	}
	return err
}

// TestReadGone deletes records below an offset in the middle of a batch and
// reads on both sides of the new log start offset.
func TestReadGone(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		topic := kafkatest.Prefix(t) + "decisions"
		createTopic(t, brokers, topic, 1, nil)
		var recs []*kgo.Record
		for i := range 10 {
			recs = append(recs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", i)})
		}
		cl := producer(t, brokers)
		produce(t, cl, recs[:5]...)
		produce(t, cl, recs[5:]...)

		rd := logread.New(kafkatest.Client(t, brokers))
		ctx := readCtx(t)
		if _, err := rd.Read(ctx, topic, 0, 2); err != nil {
			t.Fatalf("before deleting: %v", err)
		}
		deleteBelow(t, brokers, topic, 3)

		for _, tc := range []struct {
			offset int64
			want   error
		}{
			{0, logread.ErrGone},
			{2, logread.ErrGone},
			{3, nil}, // the new log start offset, in the middle of the first batch
			{7, nil},
			{10, logread.ErrNotYet},
		} {
			rec, err := rd.Read(ctx, topic, 0, tc.offset)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("offset %d: error %v, want %v", tc.offset, err, tc.want)
				continue
			}
			if err == nil {
				if d := sameRecord(rec, recs[tc.offset]); d != "" {
					t.Errorf("offset %d: %s", tc.offset, d)
				}
			} else if want := "log start offset 3"; tc.want == logread.ErrGone && !strings.Contains(err.Error(), want) {
				t.Errorf("offset %d: error %q does not say %q", tc.offset, err, want)
			}
		}
	})
}

// TestReadNoRecord reads the offsets of transaction markers and of aborted
// records: inside the log, yet no data record to return.
func TestReadNoRecord(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		topic := prefix + "decisions"
		createTopic(t, brokers, topic, 1, nil)
		cl := producer(t, brokers, kgo.TransactionalID(prefix+"txn"))
		ctx := readCtx(t)
		txn := func(commit bool, values ...string) []*kgo.Record {
			t.Helper()
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			var recs []*kgo.Record
			for _, v := range values {
				recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(v)})
			}
			produce(t, cl, recs...)
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatal(err)
			}
			return recs
		}
		committed := txn(true, "c0", "c1") // offsets 0, 1; commit marker at 2
		aborted := txn(false, "a0", "a1")  // offsets 3, 4; abort marker at 5
		after := txn(true, "c2")           // offset 6; commit marker at 7
		commitMarker := committed[1].Offset + 1
		abortMarker := aborted[1].Offset + 1
		if commitMarker != 2 || aborted[0].Offset != 3 || abortMarker != 5 || after[0].Offset != 6 {
			t.Fatalf("offsets: committed %d,%d aborted %d,%d after %d; want 0,1 3,4 6",
				committed[0].Offset, committed[1].Offset, aborted[0].Offset, aborted[1].Offset, after[0].Offset)
		}

		rd := logread.New(kafkatest.Client(t, brokers))
		for _, tc := range []struct {
			name   string
			offset int64
			want   *kgo.Record // nil: ErrNoRecord
		}{
			{"committed", 1, committed[1]},
			{"commit marker", commitMarker, nil},
			{"aborted", aborted[0].Offset, nil},
			{"aborted, last", aborted[1].Offset, nil},
			{"abort marker", abortMarker, nil},
			{"after the aborted transaction", after[0].Offset, after[0]},
		} {
			rec, err := rd.Read(ctx, topic, 0, tc.offset)
			switch {
			case tc.want == nil && !errors.Is(err, logread.ErrNoRecord):
				t.Errorf("%s (offset %d): error %v, want ErrNoRecord", tc.name, tc.offset, err)
			case tc.want != nil && err != nil:
				t.Errorf("%s (offset %d): %v", tc.name, tc.offset, err)
			case tc.want != nil:
				if d := sameRecord(rec, tc.want); d != "" {
					t.Errorf("%s (offset %d): %s", tc.name, tc.offset, d)
				}
			}
		}
	})
}

// TestReadRecreatedTopic reads a topic, deletes it and creates it again
// under the same name, then reads it again: the Reader's cached topic ID is
// stale, and the broker's UNKNOWN_TOPIC_ID must make it refresh and retry
// rather than fail.
func TestReadRecreatedTopic(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		topic := kafkatest.Prefix(t) + "decisions"
		createTopic(t, brokers, topic, 1, nil)
		cl := producer(t, brokers)
		produce(t, cl, &kgo.Record{Topic: topic, Value: []byte("old")})
		rd := logread.New(kafkatest.Client(t, brokers))
		ctx := readCtx(t)
		if rec, err := rd.Read(ctx, topic, 0, 0); err != nil || string(rec.Value) != "old" {
			t.Fatalf("before recreating: %v", err)
		}

		deleteTopic(t, brokers, topic)
		createTopic(t, brokers, topic, 1, nil)
		cl.PurgeTopicsFromClient(topic)
		// A real broker applies a deletion and the creation after it
		// asynchronously, and for a moment after the new topic exists may
		// still serve the old one's log, or refuse the new one's ID
		// (UNKNOWN_TOPIC_ID), so this first produce may fail or even land
		// in the log being deleted: the record is produced again every 2 s
		// until a Reader with no cache reads it. What is tested is rd's
		// stale cache, once the cluster has settled.
		pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := cl.ProduceSync(pctx, &kgo.Record{Topic: topic, Value: []byte("new")}).FirstErr(); err != nil {
			t.Logf("producing the record right after recreating the topic: %v", err)
		}
		pcancel()
		settled := logread.New(kafkatest.Client(t, brokers))
		wait, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for again := time.Now().Add(2 * time.Second); ; {
			if rec, err := settled.Read(wait, topic, 0, 0); err == nil && string(rec.Value) == "new" {
				break
			}
			if wait.Err() != nil {
				t.Fatal("the broker did not serve the recreated topic within 30 s")
			}
			if time.Now().After(again) {
				// A fresh client: the first one may hold the deleted topic's ID,
				// which the broker now refuses (UNKNOWN_TOPIC_ID). An error here
				// is the cluster still settling, and the loop tries again.
				fresh := producer(t, brokers)
				pctx, cancel := context.WithTimeout(wait, 5*time.Second)
				if err := fresh.ProduceSync(pctx, &kgo.Record{Topic: topic, Value: []byte("new")}).FirstErr(); err != nil {
					t.Logf("producing the record again: %v", err)
				}
				cancel()
				again = time.Now().Add(2 * time.Second)
			}
			time.Sleep(20 * time.Millisecond)
		}
		rec, err := rd.Read(readCtx(t), topic, 0, 0)
		if err != nil {
			t.Fatalf("after recreating: %v", err)
		}
		if string(rec.Value) != "new" {
			t.Fatalf("after recreating: read %q, want %q", rec.Value, "new")
		}
	})
}

// TestReadMovedLeader moves a partition to another broker after the Reader
// cached its leader (kfake only: the real test broker is a single node).
// The old leader answers NOT_LEADER_OR_FOLLOWER, and the Reader must find
// the new one.
func TestReadMovedLeader(t *testing.T) {
	const topic = "decisions"
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	want := produce(t, producer(t, brokers), &kgo.Record{Topic: topic, Value: []byte("v")})[0]
	rd := logread.New(kafkatest.Client(t, brokers))
	ctx := readCtx(t)
	if _, err := rd.Read(ctx, topic, 0, want.Offset); err != nil {
		t.Fatal(err)
	}
	from := c.LeaderFor(topic, 0)
	to := (from + 1) % 3
	if err := c.MoveTopicPartition(topic, 0, to); err != nil {
		t.Fatal(err)
	}
	rec, err := rd.Read(ctx, topic, 0, want.Offset)
	if err != nil {
		t.Fatalf("after moving the leader from broker %d to %d: %v", from, to, err)
	}
	if d := sameRecord(rec, want); d != "" {
		t.Errorf("after moving the leader: %s", d)
	}
}

// TestReadCompactedAway reads an offset whose record compaction removed
// (kfake only: a real broker compacts only closed segments, on its own
// schedule).
func TestReadCompactedAway(t *testing.T) {
	const topic = "decisions"
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.CreateTopic(topic, 1, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
	brokers := c.ListenAddrs()
	cl := producer(t, brokers)
	// A record compaction keeps before the one it removes: kfake moves
	// the log start offset past batches compacted away at the start of
	// the log (Kafka does not), which would make the gap ErrGone.
	keep := produce(t, cl, &kgo.Record{Topic: topic, Key: []byte("kept"), Value: []byte("v")})[0]
	first := produce(t, cl, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v1")})[0]
	last := produce(t, cl, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v2")})[0]
	// kfake never compacts the partition's last batch.
	produce(t, cl, &kgo.Record{Topic: topic, Key: []byte("other"), Value: []byte("v")})
	c.Compact()

	rd := logread.New(kafkatest.Client(t, brokers))
	ctx := readCtx(t)
	if _, err := rd.Read(ctx, topic, 0, first.Offset); !errors.Is(err, logread.ErrNoRecord) {
		t.Errorf("compacted offset %d: error %v, want ErrNoRecord", first.Offset, err)
	}
	for _, want := range []*kgo.Record{keep, last} {
		rec, err := rd.Read(ctx, topic, 0, want.Offset)
		if err != nil {
			t.Fatalf("kept offset %d: %v", want.Offset, err)
		}
		if d := sameRecord(rec, want); d != "" {
			t.Errorf("kept offset %d: %s", want.Offset, d)
		}
	}
}

// TestReadNoAutoCreate checks that reading an unknown topic does not create
// it even when both the cluster and the client allow auto-creation (kfake
// only: the test broker disables it).
func TestReadNoAutoCreate(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	rd := logread.New(kafkatest.Client(t, brokers, kgo.AllowAutoTopicCreation()))
	if _, err := rd.Read(readCtx(t), "nope", 0, 0); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Errorf("error %v, want one wrapping UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if ti := c.TopicInfo("nope"); ti != nil {
		t.Errorf("reading topic nope created it")
	}
}

// BenchmarkRead reads one 1 KiB record, in a batch of 100, from kfake.
func BenchmarkRead(b *testing.B) {
	const topic = "decisions"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	recs := make([]*kgo.Record, 100)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: bytes.Repeat([]byte{byte(i)}, 1024)}
	}
	produce(b, producer(b, brokers), recs...)
	rd := logread.New(kafkatest.Client(b, brokers))
	ctx := context.Background()
	want := recs[50]
	b.ReportAllocs()
	for b.Loop() {
		rec, err := rd.Read(ctx, topic, 0, want.Offset)
		if err != nil {
			b.Fatal(err)
		}
		if rec.Offset != want.Offset {
			b.Fatalf("read offset %d, want %d", rec.Offset, want.Offset)
		}
	}
}
