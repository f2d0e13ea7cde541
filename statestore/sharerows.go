package statestore

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Peers' load as the rows of their snapshots (docs/scaling.md, "Load
// shares"), with Options.Source == SourceLoadShares.
// Every writer appends, per group commit, one LoadShares record keyed by
// its replica id: its own share of each worker whose share changed. A
// store keeps one row per (writer, worker, dp rank) and adds the rows of
// the other writers to its own requests' aggregates (View.Active).
//
// Invariants, kept here:
//
//   - A writer's records are one partition of load-shares (the key is the
//     writer), so every replica reads them in the same order. What a
//     writer's rows hold is a function of that partition's records alone:
//     a record is applied only when its seq is above every seq the writer
//     had before (stale_seq otherwise, whole: the writer numbers its
//     snapshots in the order it appends them), and a row's clock is the
//     writer's clock, the largest clock of its records so far (a record
//     stamped before its predecessor is as fresh as it). Nothing in that
//     decision reads sharesNow, which other partitions move.
//   - sharesNow is the largest clock of any record applied, so replicas at
//     equal load-shares offsets hold the same one. A row counts while
//     row.clock + ActiveExpiry > sharesNow, its recent counts while
//     row.clock + decider.RecentLocalWindow > sharesNow: a dead writer's
//     load leaves when its requests would have expired anyway, and an idle
//     writer's window is not refreshed. What counts is thus a function of
//     the rows and sharesNow. A record already past the expiry when read
//     ("expired") is applied all the same, counting nothing: applying it
//     and dropping it at once is ignoring it, and applying it keeps the
//     writer's seq and rows a function of its partition.
//   - A share of all zeros deletes its row (absent is zero); a row whose
//     writer stopped stays in memory, counting nothing, bounded below.
//     Rows are never dropped by time: the bounds count the rows held, and
//     a count that depended on when a replica's clock passed a row would
//     refuse different records on different replicas.
//   - Hostile input is bounded: at most maxShareWriters writers (a record
//     of one more is refused whole, too_many_writers) and at most
//     MaxWorkers rows per writer (a share of a new worker beyond it is
//     refused, too_many_workers; the record's other shares apply), and at
//     most maxShareRows rows in all (refused the same way). The
//     per-writer bound is a function of the writer's partition; which
//     writers of a flood beyond maxShareWriters get in depends on the
//     interleaving of partitions, as for unregistered workers (skip.go).
//   - The replica's own rows are applied like any (replicas at equal
//     offsets hold equal rows) but never counted: its own requests are in
//     its slots' aggregates exactly (its partition of load-deltas and its
//     local decisions).
//   - A row of a (worker, rank) with no slot yet waits in its peerSum,
//     which a slot links to when it is created (slotOf): rows never create
//     slots, so a forged worker id costs a row, not a slot.
//   - Rows live in memory only: load-shares offsets are never stored, and
//     every open reads the topic (an hour of retention) from its start.

// maxShareWriters bounds the writers whose rows a store holds.
const maxShareWriters = 1024

// maxShareRows bounds the rows a store holds, all writers together: 64
// replicas with 16,384 workers each, far past a group's, where the
// writers' and the workers' bounds alone would let forged records hold 4
// million rows (~1 GB).
const maxShareRows = 1 << 20

// Results of applying a load-shares record, indexes of shareResults, the
// "result" labels of pdrouter_statestore_share_records_total.
const (
	shareApplied        = iota // applied, and its rows count
	shareStaleSeq              // ignored: a seq at or below the writer's latest
	shareExpired               // applied, already past the expiry: counts nothing
	shareTooManyWriters        // refused whole: maxShareWriters writers held
	shareTooManyWorkers        // a share of a new worker refused, the others applied
	numShareResults
)

var shareResults = [numShareResults]string{"applied", "stale_seq", "expired", "too_many_writers", "too_many_workers"}

// The five counts of a share, in the order of shareCounts: the active
// counts, then the recent window's (setShareRow adds them by range).
const (
	cBlocks = iota
	cRequests
	cPrefill
	cRecentDecisions
	cRecentLocal
	numShareCounts
)

type shareCounts [numShareCounts]int64

// shareRows is the rows family.
type shareRows struct {
	replica string
	expiry  int64
	maxRows int
	// maxTotal: maxShareRows (tests lower it).
	maxTotal int
	// now is sharesNow: the largest clock of any record applied.
	now     int64
	writers map[string]*shareWriter
	rows    map[shareKey]*shareRow
	// sums: per (worker, rank), the counted rows of the other writers;
	// the slot of the worker, once it exists, points to it (slotState.peer).
	sums map[workerRank]*peerSum
	due  shareDueHeap
	// counting: rows of other writers that count at now.
	counting int
}

type shareWriter struct {
	// id: the writer id, a copy of the first record's (rows name it, and
	// must not hold a decoded record's memory).
	id     string
	maxSeq uint64
	clock  int64
	rows   int
}

type shareKey struct {
	writer string
	wr     workerRank
}

type shareRow struct {
	// key: the row's key, the copies the rows map holds (the due heap
	// names rows by it, never by a decoded record's strings).
	key   shareKey
	seq   uint64
	clock int64
	c     shareCounts
	// sum is the peerSum the row counts in; nil for the replica's own rows.
	sum *peerSum
	// on and recent: what the row adds to sum now.
	on, recent bool
	// queued: the row has an item in the due heap, the one of version
	// ver. At most one: see countShareRow.
	queued bool
	ver    uint32
}

// peerSum is what the other writers' counting rows add to one (worker,
// rank).
type peerSum struct {
	c    shareCounts
	rows int // rows held that count in it, counting or not
}

func newShareRows(replica string, expiry int64, maxRows int) *shareRows {
	return &shareRows{replica: replica, expiry: expiry, maxRows: maxRows, maxTotal: maxShareRows,
		writers: map[string]*shareWriter{}, rows: map[shareKey]*shareRow{}, sums: map[workerRank]*peerSum{}}
}

// applyLoadShares applies a validated LoadShares record.
func (st *state) applyLoadShares(s *pb.LoadShares) {
	r := st.shares
	if r == nil {
		return
	}
	w := r.writers[s.GetWriterId()]
	if w == nil {
		if len(r.writers) >= maxShareWriters {
			st.stats.shareResults[shareTooManyWriters]++
			return
		}
		w = &shareWriter{id: strings.Clone(s.GetWriterId())}
		r.writers[w.id] = w
	}
	id := w.id
	if id == r.replica && st.own != nil && st.own.readOwn(s.GetSeq()) {
		st.stats.replicaIDConflicts++
	}
	if s.GetSeq() <= w.maxSeq {
		st.stats.shareResults[shareStaleSeq]++
		return
	}
	w.maxSeq = s.GetSeq()
	if id != r.replica {
		st.learnSamples(s.GetSamples())
	}
	w.clock = max(w.clock, s.GetClockUnixNano())
	r.now = max(r.now, s.GetClockUnixNano())
	if id == r.replica && st.own != nil && s.GetSeq() >= st.own.next {
		st.own.next = s.GetSeq()
		st.own.advance()
	}
	refused := false
	for _, e := range s.GetShares() {
		wr := workerRank{e.GetWorker().GetWorkerId(), e.GetWorker().GetDpRank()}
		k := shareKey{id, wr}
		c := countsOf(e)
		row := r.rows[k]
		if c == (shareCounts{}) {
			if row != nil {
				st.dropShareRow(k, row, w)
			}
			continue
		}
		if row == nil {
			if w.rows >= r.maxRows || len(r.rows) >= r.maxTotal {
				refused = true
				continue
			}
			k.wr.id = strings.Clone(wr.id)
			row = &shareRow{key: k}
			if id != r.replica {
				row.sum = st.peerSumOf(k.wr)
			}
			r.rows[k] = row
			w.rows++
		}
		st.setShareRow(row, false, false)
		row.seq, row.clock, row.c = s.GetSeq(), w.clock, c
		st.countShareRow(row)
	}
	switch {
	case refused:
		st.stats.shareResults[shareTooManyWorkers]++
	case w.clock+r.expiry <= r.now:
		st.stats.shareResults[shareExpired]++
	default:
		st.stats.shareResults[shareApplied]++
	}
	st.sweepShares()
}

// countsOf is a share's counts; each is bounded by events (MaxShareCount,
// or uint32), so every sum of maxShareWriters rows fits int64.
func countsOf(e *pb.WorkerShare) shareCounts {
	return shareCounts{int64(e.GetDecodeBlocks()), int64(e.GetRequests()), int64(e.GetPrefillTokens()),
		int64(e.GetRecentDecisions()), int64(e.GetRecentLocalTokens())}
}

// peerSumOf returns the sum of (worker, rank), creating it and linking its
// slot if there is one.
func (st *state) peerSumOf(wr workerRank) *peerSum {
	r := st.shares
	p := r.sums[wr]
	if p == nil {
		p = &peerSum{}
		r.sums[wr] = p
		if slot, ok := st.lookupSlot(wr.id, wr.rank); ok {
			st.workers[slot].peer = p
		}
	}
	p.rows++
	return p
}

// dropShareRow deletes a row whose share went to zero.
func (st *state) dropShareRow(k shareKey, row *shareRow, w *shareWriter) {
	r := st.shares
	st.setShareRow(row, false, false)
	row.ver++ // its due items are void
	delete(r.rows, k)
	w.rows--
	if p := row.sum; p != nil {
		if p.rows--; p.rows == 0 {
			delete(r.sums, k.wr)
			if slot, ok := st.lookupSlot(k.wr.id, k.wr.rank); ok && st.workers[slot].peer == p {
				st.workers[slot].peer = nil
			}
		}
	}
}

// countShareRow sets what a row counts at sharesNow and schedules its next
// change.
//
// A row keeps at most one item in the due heap. A row's clock only moves
// forward, and its next change with it, so an item queued for an earlier
// update falls due at or before the row's next change: popped, it
// recounts the row (nothing changes if nothing is due) and queues the
// row's next change then. A busy worker, sent with most of its writer's
// snapshots, thus costs the heap one item per window, not one per update,
// which would pile up for an active expiry before falling due.
func (st *state) countShareRow(row *shareRow) {
	r := st.shares
	on := row.clock+r.expiry > r.now
	recent := on && row.clock+recentWindow > r.now
	st.setShareRow(row, on, recent)
	if row.queued || !on {
		return
	}
	at := row.clock + r.expiry
	if recent {
		at = row.clock + recentWindow
	}
	row.ver++
	row.queued = true
	heap.Push(&r.due, shareDue{at: at, key: row.key, ver: row.ver})
}

// setShareRow adds or removes a row's counts from its sum.
func (st *state) setShareRow(row *shareRow, on, recent bool) {
	p := row.sum
	if p == nil {
		row.on, row.recent = on, recent
		return
	}
	// The active counts go with on, the recent ones with recent.
	add := func(from, to int, on bool) {
		sign := int64(1)
		if !on {
			sign = -1
		}
		for i := from; i < to; i++ {
			p.c[i] += sign * row.c[i]
		}
	}
	if row.on != on {
		add(cBlocks, cRecentDecisions, on)
		if on {
			st.shares.counting++
		} else {
			st.shares.counting--
		}
		row.on = on
	}
	if row.recent != recent {
		add(cRecentDecisions, numShareCounts, recent)
		row.recent = recent
	}
}

// sweepShares applies the changes due at sharesNow: recent counts that
// left the window, rows that expired.
func (st *state) sweepShares() {
	r := st.shares
	for r.due.Len() > 0 && r.due[0].at <= r.now {
		it := heap.Pop(&r.due).(shareDue)
		if row := r.rows[it.key]; row != nil && row.queued && row.ver == it.ver {
			row.queued = false
			st.countShareRow(row)
		}
	}
}

type shareDue struct {
	at  int64
	key shareKey
	ver uint32
}

// shareDueHeap orders by time; the order of equal times changes no sum.
type shareDueHeap []shareDue

func (h shareDueHeap) Len() int           { return len(h) }
func (h shareDueHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h shareDueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *shareDueHeap) Push(x any)        { *h = append(*h, x.(shareDue)) }
func (h *shareDueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// famShareRow is the family byte of the rows in the digest. Rows are never
// stored; the byte only keeps their keys apart from Pebble's.
const famShareRow = 'S'

// sharesDigest returns what the digest hashes of the rows, in key order:
// sharesNow, then every row that counts at it (its own writer's too, which
// peers count) with what it counts.
func (r *shareRows) sharesDigest() [][2][]byte {
	if r == nil {
		return nil
	}
	out := [][2][]byte{{[]byte{famShareRow}, binary.LittleEndian.AppendUint64(nil, uint64(r.now))}}
	for k, row := range r.rows {
		if row.clock+r.expiry <= r.now {
			continue
		}
		c := row.c
		if row.clock+recentWindow <= r.now {
			c[cRecentDecisions], c[cRecentLocal] = 0, 0
		}
		if c == (shareCounts{}) {
			continue
		}
		// The writer length-prefixed (any string), then the worker as
		// the store's keys name it (an id holds no NUL).
		key := binary.AppendUvarint([]byte{famShareRow}, uint64(len(k.writer)))
		key = append(key, k.writer...)
		key = binary.BigEndian.AppendUint32(append(append(key, k.wr.id...), 0), k.wr.rank)
		v := binary.LittleEndian.AppendUint64(nil, row.seq)
		v = binary.LittleEndian.AppendUint64(v, uint64(row.clock))
		for _, x := range c {
			v = binary.LittleEndian.AppendUint64(v, uint64(x))
		}
		out = append(out, [2][]byte{key, v})
	}
	slices.SortFunc(out[1:], func(a, b [2][]byte) int { return cmp.Compare(string(a[0]), string(b[0])) })
	return out
}

// topicNotStored reports a topic whose offsets are never written to
// Pebble: load-shares is read from its start at every open.
func topicNotStored(t events.Topic) bool { return t == events.TopicLoadShares }
