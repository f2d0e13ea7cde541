package sim

import (
	"slices"
	"testing"
)

func (l *idList) ids() []int32 {
	var out []int32
	for id := l.head; id >= 0; id = l.next[id] {
		out = append(out, id)
	}
	return out
}

// TestIDList: ids come out head first in the order they were pushed, and an
// unlinked id, from the head, the middle or the tail, is gone from both ends.
func TestIDList(t *testing.T) {
	l := newIDList(4)
	l.grow()
	for _, id := range []int32{3, 0, 4, 1, 2} {
		l.pushTail(id)
	}
	for _, step := range []struct {
		unlink int32
		want   []int32
	}{
		{-1, []int32{3, 0, 4, 1, 2}},
		{4, []int32{3, 0, 1, 2}},
		{3, []int32{0, 1, 2}},
		{2, []int32{0, 1}},
	} {
		if step.unlink >= 0 {
			l.unlink(step.unlink)
		}
		if got := l.ids(); !slices.Equal(got, step.want) || l.tail != step.want[len(step.want)-1] {
			t.Fatalf("after unlinking %d: %v (tail %d), want %v", step.unlink, got, l.tail, step.want)
		}
	}
	l.pushTail(4)
	if got := l.ids(); !slices.Equal(got, []int32{0, 1, 4}) {
		t.Fatalf("pushed back: %v", got)
	}
}
