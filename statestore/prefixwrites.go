package statestore

import (
	"bytes"
	"cmp"
	"encoding/binary"
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
type prefixWrites struct {
	buf []byte // keys, each followed by its value
	ops []prefixOp
}

type prefixOp struct {
	off  int // the key at buf[off:off+klen], then vlen bytes of value
	klen uint16
	vlen uint16
	del  bool
}

func (w *prefixWrites) key(op prefixOp) []byte { return w.buf[op.off : op.off+int(op.klen)] }

func (w *prefixWrites) add(wk []byte, engine uint64, v []byte, del bool) {
	off := len(w.buf)
	w.buf = append(w.buf, wk...)
	w.buf = binary.BigEndian.AppendUint64(w.buf, engine)
	klen := len(w.buf) - off
	w.buf = append(w.buf, v...)
	w.ops = append(w.ops, prefixOp{off: off, klen: uint16(klen), vlen: uint16(len(v)), del: del})
}

// flush writes the held writes into b, sorted, and empties w. Equal keys
// keep their arrival order (offsets grow with it), so the last one wins.
func (w *prefixWrites) flush(b *pebble.Batch) {
	if len(w.ops) == 0 {
		return
	}
	slices.SortFunc(w.ops, func(x, y prefixOp) int {
		if c := bytes.Compare(w.key(x), w.key(y)); c != 0 {
			return c
		}
		return cmp.Compare(x.off, y.off)
	})
	for i, op := range w.ops {
		k := w.key(op)
		if i+1 < len(w.ops) && bytes.Equal(k, w.key(w.ops[i+1])) {
			continue // a later write of the same key replaces this one
		}
		if op.del {
			_ = b.Delete(k, nil)
		} else {
			_ = b.Set(k, w.buf[op.off+int(op.klen):op.off+int(op.klen)+int(op.vlen)], nil)
		}
	}
	w.reset()
}

// reset empties w; a buffer grown by a huge batch is not kept.
func (w *prefixWrites) reset() {
	if cap(w.buf) > maxHeldPrefixBytes {
		w.buf, w.ops = nil, nil
		return
	}
	w.buf, w.ops = w.buf[:0], w.ops[:0]
}

const maxHeldPrefixBytes = 16 << 20

// setPrefix writes the prefix entry of engine hash engine of the (worker,
// rank) whose key body is wk; v nil with del deletes it. Inside Apply the
// write is held (st.pw) to be written sorted; elsewhere it goes to b.
func (st *state) setPrefix(b *pebble.Batch, wk []byte, engine uint64, v []byte, del bool) {
	if st.pw != nil {
		st.pw.add(wk, engine, v, del)
		return
	}
	st.kbuf = prefixKey(st.kbuf[:0], wk, engine)
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
