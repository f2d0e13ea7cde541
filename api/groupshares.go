package api

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// A writer's load as snapshots (docs/scaling.md, "Load shares"): with a SharesSource attached, each group commit carries, with
// its appends, one LoadShares record keyed by the writer on load-shares, the
// writer's absolute share of each worker whose share changed. Peers then
// fetch one record a group commit instead of one a decision.

// SharesSource is what the group commit asks for a writer's snapshot;
// *statestore.Store implements it.
type SharesSource interface {
	// TakeShares returns the snapshot to append with this commit, or nil
	// when nothing changed.
	TakeShares() *pb.LoadShares
	// SharesNotSent hands back a snapshot that was not written, so that
	// its workers go again with the next one.
	SharesNotSent(*pb.LoadShares)
	// SharesSent says that a snapshot is on the log.
	SharesSent(*pb.LoadShares)
	// SharesChanged is signalled when a share changes; nil never fires.
	SharesChanged() <-chan struct{}
}

// sharesKeepalive is how often a writer with no append queued still runs
// a commit for its snapshot: the source decides what is due (a long
// request's share repeated, a decision leaving the recent window), the
// tick only gives it the chance.
const sharesKeepalive = time.Second

// Results of a snapshot record: the fixed "result" labels of
// pdrouter_load_share_records_total.
const (
	shareWritten     = "written"
	shareFailed      = "failed"
	shareUnencodable = "unencodable"
)

// shareMetrics show that snapshots go out (written), what the broker
// refused (failed) and what the writer could not encode (unencodable, a
// defect of the source), and how many workers each carried.
type shareMetrics struct {
	records *prometheus.CounterVec
	workers prometheus.Histogram
}

func newShareMetrics() shareMetrics {
	m := shareMetrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_load_share_records_total",
			Help: "Load share snapshots (one per group commit of a replica of --load-deltas snapshots) by result: written, failed (the produce failed; the workers go again with the next one) or unencodable (refused by the record's own rules; the workers go again).",
		}, []string{"result"}),
		workers: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pdrouter_load_share_record_workers",
			Help:    "Workers' shares in each load share snapshot written: the workers whose share this replica changed since its last snapshot.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
	}
	for _, r := range []string{shareWritten, shareFailed, shareUnencodable} {
		m.records.WithLabelValues(r)
	}
	return m
}

// groupShares is a GroupLog's snapshot source, set once by ShareLoad
// before its first commit and read by the commit loop only.
type groupShares struct {
	src    SharesSource
	writer []byte // the records' key: the replica id
	log    *slog.Logger
}

// ShareLoad makes every group commit carry src's snapshot, keyed by writer
// (the replica id, which the snapshot's writer_id must equal), and runs a
// commit for the snapshot alone when src signals a change while nothing
// is queued, and every sharesKeepalive, until ctx ends. Call it once,
// before the first Append.
//
// A signal during a commit leads to one more commit after it, never more:
// the loop keeps one pending flag (sharesDue), not a count, so a writer
// whose shares change faster than it commits sends one snapshot per
// commit, not one per change.
func (l *GroupLog) ShareLoad(ctx context.Context, src SharesSource, writer string, log *slog.Logger) error {
	if writer == "" || len(writer) > events.MaxNameLen {
		return fmt.Errorf("load shares: the writer (the replica id) must be 1 to %d bytes", events.MaxNameLen)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l.shares = &groupShares{src: src, writer: []byte(writer), log: log}
	go l.shareSignals(ctx, src.SharesChanged())
	return nil
}

// shareSignals asks for a commit on each change signal and each tick.
func (l *GroupLog) shareSignals(ctx context.Context, changed <-chan struct{}) {
	t := time.NewTicker(l.sharesEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-t.C:
		}
		l.mu.Lock()
		l.sharesDue = true
		if !l.running {
			l.running = true
			go l.commitLoop()
		}
		l.mu.Unlock()
	}
}

// takeShares returns the snapshot record to produce with this commit, nil
// when there is none. A snapshot its own rules refuse is counted, logged
// and handed back: a writer never produces a record its peers would refuse.
func (l *GroupLog) takeShares() (*kgo.Record, *pb.LoadShares) {
	if l.shares == nil {
		return nil, nil
	}
	snap := l.shares.src.TakeShares()
	if snap == nil {
		return nil, nil
	}
	r, err := events.NewRecord(l.names, l.shares.writer, snap)
	if err != nil {
		l.met.shares.records.WithLabelValues(shareUnencodable).Inc()
		l.shares.log.Error("a load share snapshot cannot be encoded; its workers go with the next one", "writer", string(l.shares.writer), "seq", snap.GetSeq(), "err", err)
		l.shares.src.SharesNotSent(snap)
		return nil, nil
	}
	return r, snap
}

// sharesProduced accounts for the snapshot record's fate: handed back to
// its source when the broker did not acknowledge it.
func (l *GroupLog) sharesProduced(snap *pb.LoadShares, err error) {
	if err != nil {
		l.met.shares.records.WithLabelValues(shareFailed).Inc()
		l.shares.log.Warn("a load share snapshot was not written; its workers go with the next one", "writer", string(l.shares.writer), "seq", snap.GetSeq(), "err", err)
		l.shares.src.SharesNotSent(snap)
		return
	}
	l.shares.src.SharesSent(snap)
	l.shareRecords.Add(1)
	l.met.shares.records.WithLabelValues(shareWritten).Inc()
	l.met.shares.workers.Observe(float64(len(snap.GetShares())))
}

// ShareRecords returns how many load-share snapshots the broker has
// acknowledged, for a reader that counts what it fetched.
func (l *GroupLog) ShareRecords() uint64 { return l.shareRecords.Load() }
