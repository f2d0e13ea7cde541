package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
)

// GroupLog is an EventLog that commits concurrent appends together: while
// one group of records is being produced, the appends that arrive wait,
// and the next group carries all of them in one produce request.
//
// Why: every answered decision waits for its own append (design.md
// invariant 5), so under load the API has many small appends at once.
// Produced one by one, franz-go's idempotent producer keeps up to five
// requests in flight per broker and sends each record in a request of its
// own, and the broker's CPU goes mostly to the number of requests, not to
// their bytes: `bench api` measured ~300 µs of broker CPU per decision at
// 8 clients. A group commit keeps the idempotent producer (a retried
// produce never duplicates a record, so every decision is in the log
// exactly once) and sends one request per group.
//
// Invariants:
//   - Append returns positions only for records the broker acknowledged
//     (acks=all), and an error for the append otherwise.
//   - An append withdrawn before its group starts (its context ended) is
//     never produced. One whose group has started may still be written
//     after Append returned its error: made durable but not answered,
//     which the audit guarantee allows (the caller retries with the same
//     request_id and gets the stored decision).
//   - The load deltas of one decode worker in one group go out as one
//     record (events.MergeDeltas), within a delta's bounds: each append
//     that carried one gets the merged record's position. A merged
//     record is acknowledged or failed whole, so every append of the group
//     sees the same fate for its delta.
//   - With shares (ShareLoad, groupshares.go), a commit carries at most
//     one snapshot record, produced in the same flush as its appends; its
//     failure goes back to its source and never fails an append.
//   - At most maxQueued bytes of records wait (an append larger than that
//     alone is taken when nothing waits); beyond that Append fails at once
//     with ErrLogFull, so a broker outage turns into quick 503s instead of
//     an unbounded queue.
type GroupLog struct {
	cl        *kgo.Client
	names     events.Names
	maxQueued int

	mu      sync.Mutex
	queue   []*groupAppend
	queued  int  // bytes of the records in queue
	running bool // a commit loop owns the client's buffer
	// sharesDue: a snapshot commit was asked for (shareSignals) and has
	// not started yet; the loop runs one commit for it even with nothing
	// queued.
	sharesDue bool

	// shares, when set (ShareLoad), gives each commit a snapshot to carry;
	// sharesEvery is the keepalive commit's period (sharesKeepalive; tests
	// lengthen it so that only their signals commit).
	shares      *groupShares
	sharesEvery time.Duration

	met groupLogMetrics

	// deltaRecords counts the load-delta records the broker acknowledged
	// (DeltaRecords).
	deltaRecords atomic.Uint64
	// shareRecords counts the load-share snapshots the broker
	// acknowledged (ShareRecords).
	shareRecords atomic.Uint64

	// onCommit, when set (tests), is called by the commit loop with each
	// group's size before it is produced.
	onCommit func(appends int)
}

// groupLogMetrics show whether grouping works (appends per group) and how
// close the queue is to refusing (queued bytes, refusals).
type groupLogMetrics struct {
	groupAppends prometheus.Histogram
	queuedBytes  prometheus.Gauge
	full         prometheus.Counter
	deltaEntries prometheus.Histogram
	shares       shareMetrics
}

func newGroupLogMetrics(reg prometheus.Registerer) groupLogMetrics {
	m := groupLogMetrics{
		groupAppends: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pdrouter_eventlog_group_appends",
			Help:    "Appends (decisions, lifecycle events, HTTP ingest) sent together in one group commit to the event log.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		queuedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pdrouter_eventlog_queued_bytes",
			Help: "Bytes of records waiting for the next group commit; appends are refused (503) beyond the bound.",
		}),
		full: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdrouter_eventlog_full_total",
			Help: "Appends refused at once because too many bytes already waited for the event log (the broker is down or slow).",
		}),
		deltaEntries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pdrouter_load_delta_record_entries",
			Help:    "Entries of each load delta record appended: the decisions and lifecycle events of one decode worker that one group commit carried.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		shares: newShareMetrics(),
	}
	if reg != nil {
		reg.MustRegister(m.groupAppends, m.queuedBytes, m.full, m.deltaEntries, m.shares.records, m.shares.workers)
	}
	return m
}

// waiting is the bytes of records waiting for a group.
func (l *GroupLog) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queued
}

// DeltaRecords returns how many load-delta records the broker has
// acknowledged: fewer than the deltas appended when a group commit merged
// some, so a reader that counts what it fetched compares with this.
func (l *GroupLog) DeltaRecords() uint64 { return l.deltaRecords.Load() }

// ErrLogFull is returned by GroupLog.Append when maxQueued bytes of
// records already wait for the log.
var ErrLogFull = errors.New("the event log is not keeping up: too many bytes of records are waiting to be appended")

type groupAppend struct {
	recs []*kgo.Record
	size int
	pos  []Position
	err  error
	done chan struct{}
}

// NewGroupLog returns a GroupLog producing through cl, which must be built
// with kgo.ManualFlushing() (the group is sent by its Flush), with
// kgo.MaxBufferedRecords above any group's record count (a manually
// flushed client fails records beyond it), and keep franz-go's defaults
// of acks=all and idempotent writes. maxQueuedBytes bounds the keys and
// values waiting for a group. Its metrics go to reg (none when nil).
func NewGroupLog(cl *kgo.Client, names events.Names, maxQueuedBytes int, reg prometheus.Registerer) *GroupLog {
	return &GroupLog{cl: cl, names: names, maxQueued: max(1, maxQueuedBytes), met: newGroupLogMetrics(reg), sharesEvery: sharesKeepalive}
}

// GroupLogClientOpts are the producer options NewGroupLog needs, to add to
// the connection's.
func GroupLogClientOpts() []kgo.Opt {
	return []kgo.Opt{kgo.ManualFlushing(), kgo.MaxBufferedRecords(1 << 20), kgo.ProducerLinger(0),
		// Records are mostly random hashes: compressing them only costs CPU
		// on the client, the broker and every consumer.
		kgo.ProducerBatchCompression(kgo.NoCompression())}
}

// Append implements EventLog.
func (l *GroupLog) Append(ctx context.Context, recs ...*kgo.Record) ([]Position, error) {
	a := &groupAppend{recs: recs, done: make(chan struct{})}
	for _, r := range recs {
		a.size += len(r.Key) + len(r.Value)
	}
	l.mu.Lock()
	if len(l.queue) > 0 && l.queued+a.size > l.maxQueued {
		l.mu.Unlock()
		l.met.full.Inc()
		return nil, fmt.Errorf("append to the event log: %w", ErrLogFull)
	}
	l.queue = append(l.queue, a)
	l.queued += a.size
	l.met.queuedBytes.Set(float64(l.queued))
	if !l.running {
		l.running = true
		go l.commitLoop()
	}
	l.mu.Unlock()
	select {
	case <-a.done:
		if a.err != nil {
			return nil, fmt.Errorf("append to the event log: %w", a.err)
		}
		return a.pos, nil
	case <-ctx.Done():
		l.mu.Lock()
		if i := slices.Index(l.queue, a); i >= 0 {
			l.queue = slices.Delete(l.queue, i, i+1)
			l.queued -= a.size
			l.met.queuedBytes.Set(float64(l.queued))
		}
		l.mu.Unlock()
		return nil, fmt.Errorf("append to the event log: %w", ctx.Err())
	}
}

// commitLoop commits groups until the queue is empty and no snapshot
// commit is due. Every commit takes the snapshot (when shares are set), so
// one that starts after a signal answers it, whether or not it carries
// appends.
func (l *GroupLog) commitLoop() {
	for {
		l.mu.Lock()
		group := l.queue
		l.queue, l.queued = nil, 0
		l.met.queuedBytes.Set(0)
		due := l.sharesDue
		l.sharesDue = false
		if len(group) == 0 && !due {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		if len(group) > 0 {
			l.met.groupAppends.Observe(float64(len(group)))
			if l.onCommit != nil {
				l.onCommit(len(group))
			}
		}
		l.commit(group)
	}
}

// commit produces a group's records, and the writer's snapshot when there
// is one, and flushes them as one send.
func (l *GroupLog) commit(group []*groupAppend) {
	out, owner := l.mergeDeltas(group)
	// The snapshot goes last and belongs to no append: its fate is its
	// source's (sharesProduced), never an append's error.
	shareRec, snap := l.takeShares()
	if shareRec != nil {
		out = append(out, shareRec)
	}
	if len(group) == 0 && shareRec == nil {
		return // a snapshot commit with nothing to send
	}
	pos := make([]Position, len(out))
	errs := make([]error, len(out))
	var wg sync.WaitGroup
	for j, r := range out {
		wg.Add(1)
		// Promises run one at a time on franz-go's promise goroutine;
		// wg.Wait orders their writes before the reads below.
		l.cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				errs[j] = err
				return
			}
			t, _ := l.names.Logical(r.Topic)
			pos[j] = Position{Topic: t, Partition: r.Partition, Offset: r.Offset}
		})
	}
	// Flush returns when every buffered record is acknowledged or failed;
	// its error is only the context's, which never ends here.
	_ = l.cl.Flush(context.Background())
	wg.Wait()
	if shareRec != nil {
		l.sharesProduced(snap, errs[len(out)-1])
	}
	deltas := l.names.Physical(events.TopicLoadDeltas)
	for j, r := range out {
		if r.Topic == deltas && errs[j] == nil {
			l.deltaRecords.Add(1)
		}
	}
	for ai, a := range group {
		a.pos = make([]Position, len(a.recs))
		for i := range a.recs {
			j := owner[ai][i]
			if errs[j] != nil && a.err == nil {
				a.err = errs[j]
			}
			a.pos[i] = pos[j]
		}
		close(a.done)
	}
}

// mergeDeltas lays out the records a group produces: the appends' records
// in order, but for the load deltas of one key, which go into the first
// of them while the merge stays within a delta's bounds. owner[a][i] is
// the index in out of group[a].recs[i]. A caller's record is never
// modified: a merge copies it first.
func (l *GroupLog) mergeDeltas(group []*groupAppend) (out []*kgo.Record, owner [][]int) {
	deltas := l.names.Physical(events.TopicLoadDeltas)
	type merging struct {
		at      int // index in out
		entries int
		copied  bool
	}
	var byKey map[string]*merging
	var all []*merging // in the order they were started
	owner = make([][]int, len(group))
	for ai, a := range group {
		owner[ai] = make([]int, len(a.recs))
		for i, r := range a.recs {
			owner[ai][i] = len(out)
			n, ok := 0, false
			if r.Topic == deltas {
				n, ok = events.DeltaEntries(r.Value)
			}
			if !ok {
				out = append(out, r)
				continue
			}
			if byKey == nil {
				byKey = map[string]*merging{}
			}
			if m := byKey[string(r.Key)]; m != nil {
				dst := out[m.at]
				v := dst.Value
				if !m.copied {
					v = slices.Clip(v)
				}
				if v, entries, merged := events.MergeDeltas(v, m.entries, r.Value, n); merged {
					if !m.copied {
						c := *dst
						out[m.at], dst = &c, &c
						m.copied = true
					}
					dst.Value, m.entries = v, entries
					owner[ai][i] = m.at
					continue
				}
			}
			m := &merging{at: len(out), entries: n}
			byKey[string(r.Key)] = m
			all = append(all, m)
			out = append(out, r)
		}
	}
	for _, m := range all {
		l.met.deltaEntries.Observe(float64(m.entries))
	}
	return out, owner
}
