package logread_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events/logread"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// findBase is the time the find tests stamp their records around: old, so
// the test topics keep records forever (createTopic).
var findBase = time.UnixMilli(1_780_000_000_000)

// valueIs matches the record whose value is v.
func valueIs(v string) func(*kgo.Record) bool {
	return func(r *kgo.Record) bool { return string(r.Value) == v }
}

// stamped returns a record for partition 0 of topic with value v stamped
// findBase + d.
func stamped(topic, v string, d time.Duration) *kgo.Record {
	return &kgo.Record{Topic: topic, Value: []byte(v), Timestamp: findBase.Add(d)}
}

// TestFindNearAmongMany: three producers, writers whose clocks are a few
// seconds apart, append 600 keyed records over 3 partitions through
// franz-go's default partitioner, in 20 rounds of 10 s of record time; in
// each round they append at once, so their records interleave on the log
// out of timestamp order. KeyPartition must name the partition of every
// record, and FindNear must find a sample of records by key partition and
// timestamp alone, among a minute of other records either side.
func TestFindNearAmongMany(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		topic := kafkatest.Prefix(t) + "decisions"
		createTopic(t, brokers, topic, 3, nil)
		const rounds, producers, chunk = 20, 3, 10
		const n = rounds * producers * chunk
		skew := [producers]time.Duration{0, 4 * time.Second, -3 * time.Second}
		recs := make([]*kgo.Record, n)
		for i := range recs {
			round, p, k := i/(producers*chunk), i/chunk%producers, i%chunk
			recs[i] = &kgo.Record{
				Topic:     topic,
				Key:       fmt.Appendf(nil, "decode-%d", i%11),
				Value:     fmt.Appendf(nil, "decision-%03d", i),
				Timestamp: findBase.Add(time.Duration(round)*10*time.Second + time.Duration(k)*100*time.Millisecond + skew[p]),
			}
		}
		var cls [producers]*kgo.Client
		for p := range cls {
			cls[p] = kafkatest.Client(t, brokers) // the default partitioner: no RecordPartitioner option
		}
		for round := range rounds {
			var wg sync.WaitGroup
			for p, cl := range cls {
				first := (round*producers + p) * chunk
				wg.Go(func() { produce(t, cl, recs[first:first+chunk]...) })
			}
			wg.Wait()
		}
		if back := stampedBack(recs); back == 0 {
			t.Fatal("every partition holds its records in timestamp order: the test needs them out of order")
		}

		rd := logread.New(kafkatest.Client(t, brokers))
		ctx := readCtx(t)
		parts, err := rd.Partitions(ctx, topic)
		if err != nil || parts != 3 {
			t.Fatalf("Partitions = %d, %v; want 3", parts, err)
		}
		for i, r := range recs {
			p, err := logread.KeyPartition(r.Key, parts)
			if err != nil || p != r.Partition {
				t.Fatalf("record %d (key %s): KeyPartition = %d, %v; the producer wrote it to partition %d", i, r.Key, p, err, r.Partition)
			}
		}
		for i := 0; i < n; i += 37 {
			want := recs[i]
			p, _ := logread.KeyPartition(want.Key, parts)
			got, err := rd.FindNear(ctx, topic, p, want.Timestamp, valueIs(string(want.Value)), logread.ScanLimits{})
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			if d := sameRecord(got, want); d != "" {
				t.Errorf("record %d: %s", i, d)
			}
		}

		// A value no record has, in the middle of the log: the scan reads
		// the window and a record past it, and says so.
		mid := findBase.Add(100 * time.Second)
		_, err = rd.FindNear(ctx, topic, 1, mid, valueIs("no-such-decision"), logread.ScanLimits{})
		if !errors.Is(err, logread.ErrNotFound) || errors.Is(err, logread.ErrGone) || errors.Is(err, logread.ErrNotYet) {
			t.Fatalf("absent record: error %v, want ErrNotFound alone", err)
		}
		for _, s := range []string{topic + "[1] near ", "more than 1m0s after it"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}

		// The bounds, each hit before the record sought.
		last := recs[n-1]
		lp, _ := logread.KeyPartition(last.Key, parts)
		for _, tc := range []struct {
			name string
			lim  logread.ScanLimits
			say  string
		}{
			{"records", logread.ScanLimits{Before: 40 * time.Second, Records: 5}, "5 records"},
			{"bytes", logread.ScanLimits{Before: 40 * time.Second, Bytes: 1}, "1 bytes"},
		} {
			_, err := rd.FindNear(ctx, topic, lp, last.Timestamp, valueIs(string(last.Value)), tc.lim)
			if !errors.Is(err, logread.ErrScanLimit) || !strings.Contains(err.Error(), tc.say) {
				t.Errorf("%s bound: error %v, want ErrScanLimit saying %q", tc.name, err, tc.say)
			}
		}
		// The same scans without the bounds find it.
		if _, err := rd.FindNear(ctx, topic, lp, last.Timestamp, valueIs(string(last.Value)), logread.ScanLimits{Before: 40 * time.Second}); err != nil {
			t.Errorf("unbounded scan: %v", err)
		}

		// Past the end of the log, nothing is stamped there yet; at the
		// last record's time, the scan reaches the high watermark inside
		// its window.
		for _, at := range []time.Time{last.Timestamp.Add(time.Hour), last.Timestamp} {
			if _, err := rd.FindNear(ctx, topic, lp, at, valueIs("no-such-decision"), logread.ScanLimits{}); !errors.Is(err, logread.ErrNotYet) || errors.Is(err, logread.ErrGone) {
				t.Errorf("near %v: error %v, want ErrNotYet", at, err)
			}
		}
	})
}

// stampedBack counts the records stamped earlier than the record before
// them on their partition.
func stampedBack(recs []*kgo.Record) int {
	byPos := slices.Clone(recs)
	slices.SortFunc(byPos, func(a, b *kgo.Record) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	back := 0
	for i := 1; i < len(byPos); i++ {
		if byPos[i].Partition == byPos[i-1].Partition && byPos[i].Timestamp.Before(byPos[i-1].Timestamp) {
			back++
		}
	}
	return back
}

// TestFindNearOutOfOrder: timestamps on a partition follow the order of
// appends, not of time. The scan must pass records stamped before its
// window (written late) and records stamped later within it, and find the
// record behind them; a record appended after one stamped past its window
// is not found, as documented.
func TestFindNearOutOfOrder(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		topic := kafkatest.Prefix(t) + "decisions"
		createTopic(t, brokers, topic, 1, nil)
		cl := producer(t, brokers)
		recs := []*kgo.Record{
			stamped(topic, "early", -30*time.Second),
			stamped(topic, "ahead", 50*time.Second),       // a writer ahead, within the window
			stamped(topic, "long-ago", -10*time.Minute),   // appended late
			stamped(topic, "target", 0),                   // behind both
			stamped(topic, "far-ahead", 2*time.Minute),    // past the window
			stamped(topic, "hidden", time.Millisecond),    // behind it
			stamped(topic, "tail", 3*time.Minute),         // the end of the log
			stamped(topic, "late-ms", 2*time.Millisecond), // never reached
		}
		// One produce per record, so that each is its own batch and the
		// broker's time index sees each timestamp.
		for _, r := range recs {
			produce(t, cl, r)
		}
		rd := logread.New(kafkatest.Client(t, brokers))
		ctx := readCtx(t)

		got, err := rd.FindNear(ctx, topic, 0, findBase, valueIs("target"), logread.ScanLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if d := sameRecord(got, recs[3]); d != "" {
			t.Fatalf("target: %s", d)
		}
		// A nanosecond time finds the record stamped with its millisecond.
		if _, err := rd.FindNear(ctx, topic, 0, findBase.Add(999_999), valueIs("target"), logread.ScanLimits{}); err != nil {
			t.Fatalf("target at a nanosecond time: %v", err)
		}
		var seen []string
		_, err = rd.FindNear(ctx, topic, 0, findBase.Add(time.Millisecond), func(r *kgo.Record) bool {
			seen = append(seen, string(r.Value))
			return string(r.Value) == "hidden"
		}, logread.ScanLimits{})
		if !errors.Is(err, logread.ErrNotFound) {
			t.Fatalf("hidden: error %v, want ErrNotFound", err)
		}
		if want := "ahead long-ago target far-ahead"; strings.Join(seen, " ") != want {
			t.Errorf("hidden: the scan offered %q, want %q", seen, want)
		}
	})
}

// TestFindNearGone deletes the records below the one sought: the window's
// start is then the log start offset, and the answer is ErrGone, never
// ErrNotFound.
func TestFindNearGone(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		topic := kafkatest.Prefix(t) + "decisions"
		createTopic(t, brokers, topic, 1, nil)
		var recs []*kgo.Record
		for i := range 10 {
			recs = append(recs, stamped(topic, fmt.Sprintf("v%d", i), time.Duration(i)*time.Second))
		}
		produce(t, producer(t, brokers), recs...)
		rd := logread.New(kafkatest.Client(t, brokers))
		ctx := readCtx(t)
		if _, err := rd.FindNear(ctx, topic, 0, recs[2].Timestamp, valueIs("v2"), logread.ScanLimits{}); err != nil {
			t.Fatalf("before deleting: %v", err)
		}
		deleteBelow(t, brokers, topic, 5)
		for _, tc := range []struct {
			value string
			at    time.Time
			want  error
		}{
			{"v2", recs[2].Timestamp, logread.ErrGone}, // reads v5..v9, the end
			{"v5", recs[5].Timestamp, nil},
			{"v8", recs[8].Timestamp, nil},
		} {
			_, err := rd.FindNear(ctx, topic, 0, tc.at, valueIs(tc.value), logread.ScanLimits{})
			if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Errorf("%s: error %v, want %v", tc.value, err, tc.want)
			}
		}
		// Every record deleted: no record stamped in the window remains.
		deleteBelow(t, brokers, topic, 10)
		if _, err := rd.FindNear(ctx, topic, 0, recs[8].Timestamp, valueIs("v8"), logread.ScanLimits{}); !errors.Is(err, logread.ErrGone) {
			t.Errorf("every record deleted: error %v, want ErrGone", err)
		}
	})
}

// unreachable returns a Reader whose client's only broker does not answer:
// a request would fail, or hang until its context ends.
func unreachable(t *testing.T) *logread.Reader {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return logread.New(cl)
}

// deleteBelow deletes the records of partition 0 of topic below offset.
func deleteBelow(t *testing.T, brokers []string, topic string, offset int64) {
	t.Helper()
	var del kadm.Offsets
	del.AddOffset(topic, 0, offset, -1)
	resp, err := kadm.NewClient(kafkatest.Client(t, brokers)).DeleteRecords(readCtx(t), del)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete records below offset %d: %v", offset, err)
	}
}

// TestFindNearBadInputAtOnce checks that bad input fails before any
// request: the client's only broker does not answer.
func TestFindNearBadInputAtOnce(t *testing.T) {
	rd := unreachable(t)
	any := func(*kgo.Record) bool { return true }
	for _, tc := range []struct {
		topic     string
		partition int32
		match     func(*kgo.Record) bool
		lim       logread.ScanLimits
		want      string
	}{
		{"", 0, any, logread.ScanLimits{}, "empty topic name"},
		{"d", -1, any, logread.ScanLimits{}, "negative partition -1"},
		{"d", 0, nil, logread.ScanLimits{}, "nil match"},
		{"d", 0, any, logread.ScanLimits{Records: -1}, "negative limits"},
		{"d", 0, any, logread.ScanLimits{Before: -time.Second}, "negative limits"},
	} {
		call := fmt.Sprintf("FindNear(%q, %d, %+v)", tc.topic, tc.partition, tc.lim)
		err := atOnce(t, call, func(ctx context.Context) error {
			_, err := rd.FindNear(ctx, tc.topic, tc.partition, findBase, tc.match, tc.lim)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "logread: "+tc.topic+"[") {
			t.Errorf("%s = %v, want %q", call, err, tc.want)
		}
	}
}

// TestKeyPartition checks KeyPartition against the murmur2 values of
// Kafka's Java client (its UtilsTest): the partition is the hash with its
// sign bit cleared, modulo the partition count.
func TestKeyPartition(t *testing.T) {
	for _, tc := range []struct {
		key  string
		hash int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	} {
		for _, n := range []int32{1, 3, 7, 16, 1000, math.MaxInt32} {
			want := (tc.hash & 0x7fffffff) % n
			if got, err := logread.KeyPartition([]byte(tc.key), n); err != nil || got != want {
				t.Errorf("KeyPartition(%q, %d) = %d, %v; want %d", tc.key, n, got, err, want)
			}
		}
	}
	// An empty key is a key; a nil one is not.
	if p, err := logread.KeyPartition([]byte{}, 7); err != nil || p < 0 || p >= 7 {
		t.Errorf("empty key: %d, %v", p, err)
	}
	for _, tc := range []struct {
		key []byte
		n   int32
	}{{nil, 3}, {[]byte("k"), 0}, {[]byte("k"), -3}} {
		if p, err := logread.KeyPartition(tc.key, tc.n); err == nil {
			t.Errorf("KeyPartition(%v, %d) = %d, want an error", tc.key, tc.n, p)
		}
	}
}

// BenchmarkFindNear measures a search of a partition written at 50
// uncompressed records of 1 KiB a second (6,000 records, two minutes): found, a second into its
// window (50 records), and missing, when the scan reads the whole window to
// the first record a minute past the time (3,050 records, 3 MiB). On kfake,
// and on the real broker when PDR_TEST_BROKERS is set.
func BenchmarkFindNear(b *testing.B) {
	run := func(b *testing.B, brokers []string) {
		topic := kafkatest.Prefix(b) + "decisions"
		createTopic(b, brokers, topic, 1, nil)
		// Uncompressed, as the router writes decisions
		// (api.GroupLogClientOpts): the byte bound counts fetched bytes.
		cl := producer(b, brokers, kgo.ProducerBatchCompression(kgo.NoCompression()))
		const n, every = 6000, 20 * time.Millisecond
		for first := 0; first < n; first += 100 {
			recs := make([]*kgo.Record, 100)
			for i := range recs {
				v := make([]byte, 1024)
				copy(v, fmt.Sprintf("decision-%04d", first+i))
				recs[i] = &kgo.Record{Topic: topic, Value: v, Timestamp: findBase.Add(time.Duration(first+i) * every)}
			}
			produce(b, cl, recs...)
		}
		rd := logread.New(kafkatest.Client(b, brokers))
		ctx := context.Background()
		at := findBase.Add(n / 4 * every)
		want := fmt.Appendf(nil, "decision-%04d", n/4)
		b.Run("found", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := rd.FindNear(ctx, topic, 0, at, func(r *kgo.Record) bool { return bytes.HasPrefix(r.Value, want) }, logread.ScanLimits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("missing", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := rd.FindNear(ctx, topic, 0, at, valueIs("none"), logread.ScanLimits{}); !errors.Is(err, logread.ErrNotFound) {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("kfake", func(b *testing.B) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		run(b, c.ListenAddrs())
	})
	b.Run("kafka", func(b *testing.B) { run(b, kafkatest.Brokers(b)) })
}
