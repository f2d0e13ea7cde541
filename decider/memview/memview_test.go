package memview_test

import (
	"fmt"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/decider/memview"
)

func chain(n int) []uint64 {
	c := make([]uint64, n)
	for i := range c {
		c[i] = uint64(1000 + i)
	}
	return c
}

func TestMatchPrefixTiers(t *testing.T) {
	c := chain(10)
	v := memview.New()
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		v.Add(decider.WorkerInfo{ID: id, BlockSize: 16})
	}
	v.Add(decider.WorkerInfo{ID: "other-size", BlockSize: 32})
	v.Store("a", memview.Device, c[:4]...)
	v.Store("a", memview.Host, c[4:6]...)
	v.Store("a", memview.Disk, c[6:7]...)
	v.Store("a", memview.Device, c[8:]...) // after a gap: not leading
	v.Store("b", memview.Host, c[:3]...)   // no device block at all
	v.Store("c", memview.Device, c...)     // the whole chain
	v.Store("d", memview.Disk, c[1:]...)   // misses the first block
	v.Store("e", memview.Device, c[:2]...)
	v.Store("e", memview.Disk, c[2:3]...)
	v.Store("e", memview.Host, c[3:4]...) // a host block after a disk block stays in the disk run
	v.Store("other-size", memview.Device, c...)

	dst := make([]decider.TierOverlap, 6)
	dst[5] = decider.TierOverlap{Device: -7}
	v.MatchPrefix(16, c, dst)
	want := []decider.TierOverlap{
		{Device: 4, Host: 2, Disk: 1},
		{Device: 0, Host: 3, Disk: 0},
		{Device: 10},
		{},
		{Device: 2, Host: 0, Disk: 2},
		{Device: -7}, // other block size: untouched
	}
	for i := range want {
		if dst[i] != want[i] {
			t.Errorf("worker %d: %+v, want %+v", i, dst[i], want[i])
		}
	}
	v.Evict("c", memview.Device, c[5])
	v.MatchPrefix(16, c, dst)
	if dst[2] != (decider.TierOverlap{Device: 5}) {
		t.Errorf("after evict: %+v", dst[2])
	}
}

// More than 512 workers takes the heap path of the bitsets.
func TestMatchPrefixManyWorkers(t *testing.T) {
	c := chain(8)
	v := memview.New()
	for i := range 700 {
		id := fmt.Sprintf("w%d", i)
		v.Add(decider.WorkerInfo{ID: id, BlockSize: 16})
		v.Store(id, memview.Device, c[:i%9]...)
		v.MarkActive(id, c[:i%5]...)
	}
	dst := make([]decider.TierOverlap, 700)
	shared := make([]int, 700)
	v.MatchPrefix(16, c, dst)
	v.MatchActive(16, c, shared)
	for i := range 700 {
		if dst[i].Device != i%9 || dst[i].Total() != i%9 {
			t.Fatalf("worker %d: %+v, want %d device blocks", i, dst[i], i%9)
		}
		if shared[i] != i%5 {
			t.Fatalf("worker %d: %d shared, want %d", i, shared[i], i%5)
		}
	}
}

func TestLoadAndActive(t *testing.T) {
	v := memview.New()
	ref := v.Add(decider.WorkerInfo{ID: "a", BlockSize: 16})
	if _, ok := v.Load(ref); ok {
		t.Fatal("load present before any sample")
	}
	v.SetLoad("a", decider.LoadSample{KVUsedBlocks: 3})
	if s, ok := v.Load(ref); !ok || s.KVUsedBlocks != 3 {
		t.Fatal("load not stored")
	}
	v.DropLoad("a")
	if _, ok := v.Load(ref); ok {
		t.Fatal("load not dropped")
	}
	v.SetActive("a", decider.ActiveLoad{DecodeBlocks: 9})
	if v.Active(ref).DecodeBlocks != 9 {
		t.Fatal("active not stored")
	}
	if again := v.Add(decider.WorkerInfo{ID: "a", BlockSize: 32}); again != ref || v.Workers()[ref].BlockSize != 32 {
		t.Fatal("re-registration must keep the ref and replace the info")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("unknown worker id must panic")
		}
	}()
	v.SetLoad("nope", decider.LoadSample{})
}
