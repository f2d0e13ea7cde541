package events

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka's own vectors for murmur2 (UtilsTest.testMurmur2), as Java's
// signed int.
func TestMurmur2KafkaVectors(t *testing.T) {
	for in, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := int32(murmur2([]byte(in))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

// The cell of a key is what the producer's partitioner decides: pdrouter
// writes with franz-go's default partitioner, so KeyPartition must agree
// with it for every key and partition count, and a cell's partitions must
// hold exactly the keys it owns.
func TestKeyPartitionMatchesProducer(t *testing.T) {
	parts := map[string]kgo.TopicPartitioner{
		"default (uniform bytes, keys hashed)": kgo.UniformBytesPartitioner(64<<10, true, true, nil).ForTopic("t"),
		"sticky key":                           kgo.StickyKeyPartitioner(nil).ForTopic("t"),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	keys := [][]byte{{}, []byte("decode-1"), []byte("prefill-31")}
	for range 2000 {
		k := make([]byte, rng.IntN(40))
		for i := range k {
			k[i] = byte(rng.UintN(256))
		}
		keys = append(keys, k)
	}
	for name, tp := range parts {
		for _, n := range []int32{1, 2, 3, 4, 8, 16, 17, 64} {
			for _, k := range keys {
				r := &kgo.Record{Key: k}
				var want int
				if bp, ok := tp.(kgo.TopicBackupPartitioner); ok {
					want = bp.PartitionByBackup(r, int(n), nil)
				} else {
					want = tp.Partition(r, int(n))
				}
				if got := KeyPartition(k, n); int(got) != int(want) {
					t.Fatalf("%s: key %x, %d partitions: KeyPartition %d, producer %d", name, k, n, got, want)
				}
			}
		}
	}
	// A worker's records fall in one cell whatever a topic's partition count,
	// when the cell count divides it.
	for _, k := range keys {
		for _, cells := range []int32{2, 4} {
			c := Cell{Index: KeyPartition(k, cells), Count: cells}
			for _, p := range []int32{4, 8, 16} {
				if !c.OwnsPartition(KeyPartition(k, p)) || !c.OwnsKey(k) {
					t.Fatalf("key %x: cell %s does not own its partition of %d", k, c, p)
				}
			}
		}
	}
}

func TestParseCell(t *testing.T) {
	for in, want := range map[string]string{
		"0/1": "0/1", "0/4": "0/4", "3/4": "3/4", "9999/10000": "9999/10000",
		"4/4": "want 0 ≤ i < n", "-1/4": "want 0 ≤ i < n", "0/0": "want 0 ≤ i < n", "0/10001": "want 0 ≤ i < n",
		"": "want i/n", "1": "want i/n", "a/b": "want i/n", "1/2/3": "want i/n", "99999999999/2": "want i/n",
	} {
		c, err := ParseCell(in)
		got := c.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, want) {
			t.Errorf("ParseCell(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckPartitionCounts(t *testing.T) {
	c := Cell{Index: 1, Count: 4}
	topics := []string{"kv-events", "load", "workers"}
	for _, tc := range []struct {
		counts []int
		want   string // "" for no error
	}{
		{[]int{16, 8, 4}, ""},
		{[]int{16, 8, 6}, "topic workers has 6 partitions, not a multiple of 4, so one worker's records would fall in different cells; these topics allow a cell count that divides 2"},
		{[]int{16, 2, 4}, "topic load has 2 partitions"},
		{[]int{0, 8, 4}, "topic kv-events has 0 partitions"},
	} {
		err := c.CheckPartitionCounts(topics, tc.counts)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.counts, err)
		case tc.want != "" && (!errors.Is(err, ErrCellPartitions) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: %v, want it to say %q", tc.counts, err, tc.want)
		}
	}
	if err := (Cell{}).CheckPartitionCounts([]string{"x"}, []int{7}); err != nil {
		t.Errorf("the whole log owns any topic: %v", err)
	}
}

func FuzzParseCell(f *testing.F) {
	for _, s := range []string{"0/1", "3/4", "1/0", "x", "-0/2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCell(s)
		if err != nil {
			return
		}
		if c.Count < 1 || c.Count > MaxCells || c.Index < 0 || c.Index >= c.Count {
			t.Fatalf("ParseCell(%q) = %+v", s, c)
		}
		if back, err := ParseCell(c.String()); err != nil || back != c {
			t.Fatalf("ParseCell(%q) = %v, its String %q reads %v, %v", s, c, c.String(), back, err)
		}
	})
}

func ExampleCellOfWorker() {
	for _, id := range []string{"decode-1", "decode-2", "prefill-1"} {
		fmt.Println(id, CellOfWorker(id, 4))
	}
	// Output:
	// decode-1 2/4
	// decode-2 3/4
	// prefill-1 2/4
}

// TestWriterPartitionInCell: a writer's own partition (its load deltas,
// which its store alone reads back, and its snapshots, which its cell's
// peers read) is one its cell owns, whatever the cell; on the whole log it
// is its id's key partition, as before cells were asked. Before cells were
// asked, 13 of these 20 writers of cell 1/2 wrote outside it.
func TestWriterPartitionInCell(t *testing.T) {
	for _, n := range []int32{4, 16} {
		for _, c := range []Cell{{}, {Index: 0, Count: 2}, {Index: 1, Count: 2}, {Index: 3, Count: 4}} {
			seen := map[int32]bool{}
			for i := range 20 {
				w := fmt.Sprintf("router-%d", i)
				p := WriterPartition(w, n, c)
				if p < 0 || p >= n || !c.OwnsPartition(p) {
					t.Fatalf("writer %s of cell %s: partition %d of %d, not the cell's", w, c, p, n)
				}
				if c.Whole() && p != KeyPartition([]byte(w), n) {
					t.Fatalf("writer %s on the whole log: partition %d, its key's is %d", w, p, KeyPartition([]byte(w), n))
				}
				seen[p] = true
			}
			// The writers spread over the cell's partitions.
			if want := min(int(n/max(c.Count, 1)), 4); len(seen) < want/2 {
				t.Fatalf("cell %s of %d partitions: 20 writers on %d partitions", c, n, len(seen))
			}
		}
	}
}
