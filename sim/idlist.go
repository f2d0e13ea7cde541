package sim

// idList is a doubly linked list over small integer ids (block or slot ids), held
// in two arrays so that moving a block costs no allocation however large the pool.
// The GPU pool's free queue and the host tier's LRU order are each one; in both,
// the head is what goes first.
type idList struct {
	prev, next []int32
	head, tail int32
}

// newIDList returns an empty list over ids [0, n).
func newIDList(n int) idList {
	return idList{prev: make([]int32, n), next: make([]int32, n), head: -1, tail: -1}
}

// grow adds one id, unlinked, after the last.
func (l *idList) grow() {
	l.prev, l.next = append(l.prev, -1), append(l.next, -1)
}

// pushTail appends id, which must not be linked.
func (l *idList) pushTail(id int32) {
	l.prev[id], l.next[id] = l.tail, -1
	if l.tail >= 0 {
		l.next[l.tail] = id
	} else {
		l.head = id
	}
	l.tail = id
}

// unlink removes id, which must be linked.
func (l *idList) unlink(id int32) {
	pv, nx := l.prev[id], l.next[id]
	if pv >= 0 {
		l.next[pv] = nx
	} else {
		l.head = nx
	}
	if nx >= 0 {
		l.prev[nx] = pv
	} else {
		l.tail = pv
	}
	l.prev[id], l.next[id] = -1, -1
}
