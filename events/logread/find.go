package logread

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
)

// The errors FindNear returns when no record matched, besides ErrGone and
// ErrNotYet. They are wrapped with the partition, the time and what the
// scan read, so use errors.Is to test for them.
var (
	// ErrNotFound means the scan read every record from the start of its
	// window until one stamped past the window's end, and none matched:
	// the record is not where its time places it.
	ErrNotFound = errors.New("no matching record: the scan read past the end of its time window")

	// ErrScanLimit means the scan read as many records or bytes as its
	// ScanLimits allow before it reached the end of its window: the record
	// may lie further on.
	ErrScanLimit = errors.New("no matching record within the scan's record and byte limits")
)

// The defaults of ScanLimits.
const (
	// DefaultBefore covers the millisecond a Kafka timestamp drops from a
	// nanosecond time, and a topic stamped with the broker's clock
	// (LogAppendTime) that runs a little behind the writer's.
	DefaultBefore = time.Second
	// DefaultAfter is events.MaxEventSkew: a record appended before the one
	// sought, by a writer whose clock is at most that far ahead, is stamped
	// at most that far after it.
	DefaultAfter = events.MaxEventSkew
	// DefaultScanRecords and DefaultScanBytes bound the scan's cost: at
	// most 16 fetches of scanChunk bytes, and the records decoded from
	// them. A window of two minutes holds 10,000 records on a partition
	// written at 80 records a second.
	DefaultScanRecords = 10_000
	DefaultScanBytes   = 16 << 20
)

// scanChunk is the byte limit of each fetch of a scan: large enough that a
// window of a busy partition takes a few fetches, small enough that the
// record returned, which aliases its fetch, keeps little else alive.
const scanChunk = 1 << 20

// ScanLimits bounds one FindNear. A zero field takes its default.
type ScanLimits struct {
	// Before is how far before the time sought the scan starts (default
	// DefaultBefore).
	Before time.Duration
	// After ends the scan at the first record stamped later than the time
	// sought plus After (default DefaultAfter).
	After time.Duration
	// Records bounds the records decoded and offered to match (default
	// DefaultScanRecords).
	Records int
	// Bytes bounds the record batches fetched, as the broker sends them
	// (compressed). It is checked before each fetch, which asks for no
	// more than what is left of it; a broker returns a batch larger than
	// that whole, so the scan may pass Bytes by one batch (default
	// DefaultScanBytes).
	Bytes int64
}

func (l ScanLimits) withDefaults() ScanLimits {
	if l.Before == 0 {
		l.Before = DefaultBefore
	}
	if l.After == 0 {
		l.After = DefaultAfter
	}
	if l.Records == 0 {
		l.Records = DefaultScanRecords
	}
	if l.Bytes == 0 {
		l.Bytes = DefaultScanBytes
	}
	return l
}

// scan is one FindNear's window, and the prefix of every error about it.
type scan struct {
	topic     string
	partition int32
	at        time.Time
}

func (s scan) errorf(format string, args ...any) error {
	return fmt.Errorf("logread: %s[%d] near %s: "+format,
		append([]any{s.topic, s.partition, s.at.UTC().Format(time.RFC3339Nano)}, args...)...)
}

// FindNear returns the first record of (topic, partition) that match
// accepts, reading forward from the first record stamped at or after
// at - lim.Before: a record whose position is unknown but whose Kafka
// timestamp is known to be at (or near it).
//
// Kafka finds that first record (ListOffsets by timestamp) from its time
// index, whatever the partition's size; the scan then fetches forward, a
// chunk at a time, and offers match every data record in offset order.
// Records on a partition are in append order, not timestamp order, so the scan
// passes records stamped before the window without stopping; it stops at
// the first record stamped after at + lim.After. A writer whose clock runs
// further ahead than that can end the scan early.
//
// FindNear fails at once, without a request, for an empty topic name, a
// negative partition, a nil match or negative limits. When no record
// matched it returns an error wrapping:
//   - ErrGone when the scan started at the partition's log start offset
//     and records below it were deleted: the record was among them;
//   - ErrNotYet when it reached the end of the partition (the high
//     watermark, or the last stable offset) before the end of its window;
//   - ErrNotFound when it read past the end of its window;
//   - ErrScanLimit when it read lim.Records records or lim.Bytes bytes
//     first.
//
// Any other failure (the cluster, the network, ctx) returns an error
// naming the position and wrapping the cause. The returned record's Key,
// Value and Headers alias its fetch, at most scanChunk bytes and one batch.
func (r *Reader) FindNear(ctx context.Context, topic string, partition int32, at time.Time, match func(*kgo.Record) bool, lim ScanLimits) (*kgo.Record, error) {
	s := scan{topic, partition, at}
	switch {
	case topic == "":
		return nil, s.errorf("empty topic name")
	case partition < 0:
		return nil, s.errorf("negative partition %d", partition)
	case match == nil:
		return nil, s.errorf("nil match")
	case lim.Before < 0 || lim.After < 0 || lim.Records < 0 || lim.Bytes < 0:
		return nil, s.errorf("negative limits %+v", lim)
	}
	lim = lim.withDefaults()
	// ListOffsets reads negative timestamps as the special -1 (latest),
	// -2 (earliest), -3 (largest timestamp)...: a window reaching before
	// 1970 starts at the first record.
	from := max(at.Add(-lim.Before).UnixMilli(), 0)
	until := at.Add(lim.After)

	start, err := r.offsetForTime(ctx, position{topic, partition, -1}, from)
	if err != nil {
		return nil, err
	}
	if start < 0 {
		// No record is stamped at or after from.
		return nil, r.missing(ctx, s, start, s.errorf("%w (no record stamped at or after %s)", ErrNotYet, time.UnixMilli(from).UTC().Format(time.RFC3339Nano)))
	}
	var records int
	var bytes int64
	limited := func(off int64) error {
		return s.errorf("%w (%d records, %d bytes): read offsets %d to %d", ErrScanLimit, lim.Records, lim.Bytes, start, off-1)
	}
	for off := start; ; {
		if bytes >= lim.Bytes {
			return nil, limited(off)
		}
		pos := position{topic, partition, off}
		part, err := r.fetch(ctx, pos, int32(min(scanChunk, lim.Bytes-bytes)))
		if errors.Is(err, ErrNotYet) {
			return nil, r.missing(ctx, s, start, err)
		}
		if err != nil {
			return nil, err
		}
		bytes += int64(len(part.RecordBatches))
		fp, next := decode(pos, part)
		for _, rec := range fp.Records {
			if rec.Offset < off {
				continue
			}
			records++
			if match(rec) {
				return rec, nil
			}
			if rec.Timestamp.After(until) {
				return nil, r.missing(ctx, s, start, s.errorf("%w: offset %d is stamped %s, more than %s after it; read %d records from offset %d",
					ErrNotFound, rec.Offset, rec.Timestamp.UTC().Format(time.RFC3339Nano), lim.After, records, start))
			}
			if records >= lim.Records {
				return nil, limited(rec.Offset + 1)
			}
		}
		if fp.Err != nil {
			return nil, pos.errorf("decode fetched batch: %w", fp.Err)
		}
		if next <= off {
			if err := pastEnd(pos, part); err != nil {
				return nil, r.missing(ctx, s, start, err)
			}
			return nil, noBatch(pos, part)
		}
		off = next
		if err := pastEnd(position{topic, partition, off}, part); err != nil {
			return nil, r.missing(ctx, s, start, err)
		}
	}
}

// missing returns err, the reason a scan from start found nothing, unless
// the scan started at the partition's log start offset and records below it
// were deleted: then the record sought was among them, and missing returns
// an error wrapping ErrGone. A start of -1 (no record stamped in or after
// the window) is taken as the end of the log: a log whose every record was
// deleted is gone too. Only a failed scan pays for these lookups.
func (r *Reader) missing(ctx context.Context, s scan, start int64, err error) error {
	p := position{s.topic, s.partition, start}
	logStart, lerr := r.offsetForTime(ctx, p, -2)
	if lerr != nil || logStart <= 0 {
		return err
	}
	if start < 0 {
		if start, lerr = r.offsetForTime(ctx, p, -1); lerr != nil {
			return err
		}
	}
	if start <= logStart {
		// err is kept as text only: the answer is ErrGone, not both.
		return s.errorf("%w (the scan started at the log start offset %d, below which records were deleted): %v", ErrGone, logStart, err)
	}
	return err
}

// offsetForTime asks the leader of at.partition for the first offset
// stamped at or after timestamp (Unix ms; -1 for none), or for the special
// timestamps -2 (the log start offset) and -1 (the end offset), at the
// Reader's isolation level.
func (r *Reader) offsetForTime(ctx context.Context, at position, timestamp int64) (int64, error) {
	var offset int64
	err := r.onLeader(ctx, at, func(_ *topicMeta, leader int32) (bool, error) {
		var err error
		offset, err = r.listOffset(ctx, at, leader, timestamp)
		if err == nil {
			return false, nil
		}
		// A broker error is retried when it says it may pass (a moved
		// leader, say); a failed request, while ctx lasts.
		var ke *kerr.Error
		return ctx.Err() == nil && (!errors.As(err, &ke) || ke.Retriable), fmt.Errorf("logread: %s[%d]: %w", at.topic, at.partition, err)
	})
	return offset, err
}

// Partitions returns the number of partitions of topic, from the Reader's
// cache of its metadata, asked of the cluster on first use. With
// KeyPartition it names the partition a keyed record was written to, as
// long as the topic's partition count has not changed since: a record
// stays on the partition its count at write time chose, which a larger
// count may not name.
func (r *Reader) Partitions(ctx context.Context, topic string) (int32, error) {
	at := position{topic, -1, -1}
	if topic == "" {
		return 0, at.errorf("empty topic name")
	}
	tm, err := r.topicMeta(ctx, at, false)
	if err != nil {
		return 0, err
	}
	return int32(len(tm.leaders)), nil
}

// keyPartitioner is franz-go's partitioner for keyed records, the hash its
// default producer partitioner (UniformBytesPartitioner with keys) also
// uses for every record with a non-nil key: murmur2 of the key, its sign
// bit cleared, modulo the partition count, as Kafka's Java client does.
var keyPartitioner = kgo.StickyKeyPartitioner(nil)

// KeyPartition returns the partition, of a topic with the given number of
// partitions, that franz-go's default producer partitioner (and Kafka's Java
// client's) writes a record with key to. A nil key has no such partition:
// those producers spread such records, and KeyPartition returns an error;
// an empty non-nil key hashes like any other.
func KeyPartition(key []byte, partitions int32) (int32, error) {
	switch {
	case key == nil:
		return -1, errors.New("logread: a record with a nil key has no key partition")
	case partitions < 1:
		return -1, fmt.Errorf("logread: no key partition among %d partitions", partitions)
	}
	// The hash is pure for a non-nil key: the topic partitioner's sticky
	// state serves nil keys only, so a fresh one per call is exact.
	return int32(keyPartitioner.ForTopic("").Partition(&kgo.Record{Key: key}, int(partitions))), nil
}
