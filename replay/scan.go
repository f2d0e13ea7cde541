package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
)

// span is a range of offsets [From, To) of one partition to read.
type span struct {
	Topic     events.Topic
	Partition int32
	From, To  int64
}

// idleEnd is how long a scan waits for a partition that has no record
// left below its end. It only matters for a compacted topic whose last
// records before the end were removed (a tombstone past its retention):
// every other partition ends on a record at or past its end.
const idleEnd = 10 * time.Second

// scanSpans reads each span in offset order and hands the records to fn in
// the batches they were fetched in (records of several partitions
// interleaved, as a consumer sees them). A span ends at To, at the first
// record for which stop returns true (which is not passed on), or when its
// partition stays idle. It uses no consumer group: explain and replays must
// not disturb, or be disturbed by, the replicas' positions.
//
// It starts every partition at its exact From with no reset policy, so a
// From that retention has passed is an error (ErrHistoryGone) rather than a
// silent skip: a replay with a hole in it would explain nothing.
func scanSpans(ctx context.Context, conn []kgo.Opt, names events.Names, spans []span,
	stop func(*kgo.Record) bool, fn func([]*kgo.Record) error) error {
	open := map[events.Topic]map[int32]int64{}
	start := map[string]map[int32]kgo.Offset{}
	n := 0
	for _, s := range spans {
		if s.From >= s.To {
			continue
		}
		if open[s.Topic] == nil {
			open[s.Topic] = map[int32]int64{}
		}
		open[s.Topic][s.Partition] = s.To
		ph := names.Physical(s.Topic)
		if start[ph] == nil {
			start[ph] = map[int32]kgo.Offset{}
		}
		start[ph][s.Partition] = kgo.NewOffset().At(s.From)
		n++
	}
	if n == 0 {
		return nil
	}
	opts := append(slices.Clone(conn),
		kgo.ConsumePartitions(start),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchMaxBytes(64<<20),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("replay: kafka client: %w", err)
	}
	defer cl.Close()
	closeSpan := func(t events.Topic, p int32) {
		delete(open[t], p)
		if len(open[t]) == 0 {
			delete(open, t)
		}
	}
	lastProgress := time.Now()
	batch := make([]*kgo.Record, 0, 1024)
	for len(open) > 0 {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		var fatal error
		fs.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			var loss *kgo.ErrDataLoss
			if errors.Is(err, kerr.OffsetOutOfRange) || errors.As(err, &loss) {
				fatal = fmt.Errorf("%w: %s partition %d: %v", ErrHistoryGone, topic, partition, err)
				return
			}
			fatal = fmt.Errorf("replay: fetch %s/%d: %w", topic, partition, err)
		})
		if fatal != nil {
			return fatal
		}
		batch = batch[:0]
		fs.EachRecord(func(r *kgo.Record) {
			t, ok := names.Logical(r.Topic)
			if !ok {
				return
			}
			to, live := open[t][r.Partition]
			if !live {
				return
			}
			if r.Offset >= to || (stop != nil && stop(r)) {
				closeSpan(t, r.Partition)
				return
			}
			batch = append(batch, r)
			if r.Offset+1 >= to {
				closeSpan(t, r.Partition)
			}
		})
		if len(batch) > 0 {
			lastProgress = time.Now()
			if err := fn(batch); err != nil {
				return err
			}
		} else if time.Since(lastProgress) > idleEnd {
			return nil // what is left has no record below its end
		}
	}
	return nil
}

// ErrHistoryGone is matched by scans that needed records retention has
// already deleted.
var ErrHistoryGone = errors.New("replay: the log no longer holds the records needed")

// partitionBounds lists the log start and end offsets of every partition
// of the topics.
type partitionBounds map[events.Topic]map[int32][2]int64

func listBounds(ctx context.Context, adm *kadm.Client, names events.Names, topics ...events.Topic) (partitionBounds, error) {
	phys := make([]string, len(topics))
	for i, t := range topics {
		phys[i] = names.Physical(t)
	}
	starts, err := adm.ListStartOffsets(ctx, phys...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("replay: start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, phys...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("replay: end offsets: %w", err)
	}
	out := partitionBounds{}
	ends.Each(func(l kadm.ListedOffset) {
		t, ok := names.Logical(l.Topic)
		if !ok {
			return
		}
		lo := int64(0)
		if s, ok := starts.Lookup(l.Topic, l.Partition); ok {
			lo = s.Offset
		}
		if out[t] == nil {
			out[t] = map[int32][2]int64{}
		}
		out[t][l.Partition] = [2]int64{lo, l.Offset}
	})
	return out, nil
}

// sortedPartitions returns the partitions of a topic in order.
func (b partitionBounds) sortedPartitions(t events.Topic) []int32 {
	var ps []int32
	for p := range b[t] {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}
