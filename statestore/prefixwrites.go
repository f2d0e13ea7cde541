package statestore

import (
	"bytes"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// prefixWrites holds the prefix-entry writes of one Apply until its batch
// is built, then hands them to Pebble in key order, and only the last write
// of each key.
//
// Why: a prefix key ends in an engine block hash, which is random, so in
// arrival order every insert into the memtable's skiplist is a search from
// the top down to a cold node; in key order, consecutive inserts walk
// nearly the same path, which the CPU cache still holds. The batch commits
// the same final writes, so the store's content (and its digest) is the
// same; only the sequence numbers Pebble gives the batch's keys differ, and
// nothing reads those.
//
// Prefix keys are written by the prefix rules only (prefix.go), so their
// order against the other families' writes does not matter, except for a
// range deletion, which must come after the writes before it: the state
// hands the held writes to the batch before each one (state.deleteRange).
//
// A key is a (worker, rank) key body and an engine hash (prefixKey), so the
// writes are grouped by key body and sorted by engine hash within a group:
// integer comparisons, where comparing whole keys would go through the
// shared key body every time.
type prefixWrites struct {
	groups []prefixGroup
	byBody map[string]int // key body → index in groups
	last   int            // the group of the previous write: records come in runs of one worker
	vals   []byte         // the values, in arrival order
	n      int            // writes held
	kbuf   []byte
	tmp    []prefixOp // sortByEngine's
}

type prefixGroup struct {
	body []byte // the (worker, rank) key body, as the slot holds it
	ops  []prefixOp
}

type prefixOp struct {
	engine uint64
	voff   uint32 // the value at vals[voff:voff+vlen]; a deletion has none
	vlen   uint8
	del    bool
}

// add holds a write; when maxHeldPrefixWrites are held, they go to b first
// (any point is a valid one to flush at), which bounds w by something
// other than the size of a poll.
func (w *prefixWrites) add(b *pebble.Batch, body []byte, engine uint64, v []byte, del bool) {
	if w.n >= maxHeldPrefixWrites {
		w.flush(b)
	}
	g := w.group(body)
	w.groups[g].ops = append(w.groups[g].ops, prefixOp{engine: engine, voff: uint32(len(w.vals)), vlen: uint8(len(v)), del: del})
	w.vals = append(w.vals, v...)
	w.n++
}

func (w *prefixWrites) group(body []byte) int {
	if w.last < len(w.groups) && bytes.Equal(w.groups[w.last].body, body) {
		return w.last
	}
	if w.byBody == nil {
		w.byBody = map[string]int{}
	}
	g, ok := w.byBody[string(body)]
	if !ok {
		g = len(w.groups)
		if g < cap(w.groups) {
			w.groups = w.groups[:g+1] // keeps the ops slice of a group of a previous batch
			w.groups[g].body = append(w.groups[g].body[:0], body...)
			w.groups[g].ops = w.groups[g].ops[:0]
		} else {
			w.groups = append(w.groups, prefixGroup{body: slices.Clone(body)})
		}
		w.byBody[string(body)] = g
	}
	w.last = g
	return g
}

// sortByEngine sorts ops by engine hash, stably: the writes of one key
// stay in arrival order, so the last one is last. Engine hashes are
// uniform 64-bit values, so a radix sort (a byte at a time, least
// significant first) does fewer steps than comparisons would; small groups
// take an insertion sort. tmp is scratch space, returned grown.
func sortByEngine(ops, tmp []prefixOp) []prefixOp {
	if len(ops) <= 24 {
		for i := 1; i < len(ops); i++ {
			for j := i; j > 0 && ops[j-1].engine > ops[j].engine; j-- {
				ops[j-1], ops[j] = ops[j], ops[j-1]
			}
		}
		return tmp
	}
	if cap(tmp) < len(ops) {
		tmp = make([]prefixOp, len(ops))
	}
	var counts [8][256]uint32
	for _, op := range ops {
		for d := range counts {
			counts[d][byte(op.engine>>(8*d))]++
		}
	}
	src, dst := ops, tmp[:len(ops)]
	for d := range counts {
		c := &counts[d]
		if c[byte(src[0].engine>>(8*d))] == uint32(len(src)) {
			continue // every hash has this byte: the pass would not move anything
		}
		var sum uint32
		for i, n := range c {
			c[i] = sum
			sum += n
		}
		for _, op := range src {
			k := byte(op.engine >> (8 * d))
			dst[c[k]] = op
			c[k]++
		}
		src, dst = dst, src
	}
	if &src[0] != &ops[0] {
		copy(ops, src)
	}
	return tmp
}

// flush writes the held writes into b, sorted, and empties w.
func (w *prefixWrites) flush(b *pebble.Batch) {
	if w.n == 0 {
		return
	}
	slices.SortFunc(w.groups, func(x, y prefixGroup) int { return bytes.Compare(x.body, y.body) })
	for _, g := range w.groups {
		w.tmp = sortByEngine(g.ops, w.tmp)
		for i, op := range g.ops {
			if i+1 < len(g.ops) && g.ops[i+1].engine == op.engine {
				continue // a later write of the same key replaces this one
			}
			w.kbuf = prefixKey(w.kbuf[:0], g.body, op.engine)
			if op.del {
				_ = b.Delete(w.kbuf, nil)
			} else {
				_ = b.Set(w.kbuf, w.vals[op.voff:op.voff+uint32(op.vlen)], nil)
			}
		}
	}
	w.reset()
}

// reset empties w; buffers grown by a huge batch are not kept.
func (w *prefixWrites) reset() {
	if len(w.groups) > maxHeldPrefixGroups {
		*w = prefixWrites{}
		return
	}
	clear(w.byBody)
	w.groups, w.vals, w.n, w.last = w.groups[:0], w.vals[:0], 0, 0
}

const (
	maxHeldPrefixWrites = 1 << 20
	maxHeldPrefixGroups = 4096
)

// setPrefix writes the prefix entry of engine hash engine of the (worker,
// rank) whose key body is body; with del it deletes it (v unused). Inside
// Apply the write is held (st.pw) to be written sorted; elsewhere it goes
// to b at once.
func (st *state) setPrefix(b *pebble.Batch, body []byte, engine uint64, v []byte, del bool) {
	if st.pw != nil {
		st.pw.add(b, body, engine, v, del)
		return
	}
	st.kbuf = prefixKey(st.kbuf[:0], body, engine)
	if del {
		_ = b.Delete(st.kbuf, nil)
	} else {
		_ = b.Set(st.kbuf, v, nil)
	}
}

// deleteRange deletes [lo, hi) after every write held so far.
func (st *state) deleteRange(b *pebble.Batch, lo, hi []byte) {
	if st.pw != nil {
		st.pw.flush(b)
	}
	_ = b.DeleteRange(lo, hi, nil)
}
