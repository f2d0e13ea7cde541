package logtail

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// From is a start position, resolved to an exact offset per partition before
// reading, so the tail knows when it has reached the end.
type From struct {
	kind   fromKind
	offset int64 // fromOffset: absolute; fromRelative: records before the end
	millis int64 // fromTime
}

type fromKind int

const (
	fromStart fromKind = iota
	fromEnd
	fromOffset
	fromRelative
	fromTime
)

// ParseFromOffset parses --from-offset: "start", "end", an offset N, or -N
// for the last N records of each partition.
func ParseFromOffset(s string) (From, error) {
	switch s {
	case "", "start":
		return From{kind: fromStart}, nil
	case "end":
		return From{kind: fromEnd}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return From{}, fmt.Errorf("--from-offset %q: want start, end, an offset N, or -N for the last N records", s)
	}
	if n < 0 {
		return From{kind: fromRelative, offset: -n}, nil
	}
	return From{kind: fromOffset, offset: n}, nil
}

// ParseFromTime parses --from-time: RFC 3339, or Unix milliseconds.
func ParseFromTime(s string) (From, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return From{kind: fromTime, millis: ms}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return From{}, fmt.Errorf("--from-time %q: want RFC 3339 (2026-11-29T10:00:00Z) or Unix milliseconds", s)
	}
	return From{kind: fromTime, millis: t.UnixMilli()}, nil
}

// resolve returns the exact start offset and the current end offset of each
// selected partition.
func resolve(ctx context.Context, connOpts []kgo.Opt, physical string, o Options) (start, end map[int32]int64, err error) {
	cl, err := kgo.NewClient(connOpts...)
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, physical)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("log tail: end offsets of %s: %w", physical, err)
	}
	starts, err := adm.ListStartOffsets(ctx, physical)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("log tail: start offsets of %s: %w", physical, err)
	}
	var after kadm.ListedOffsets
	if o.From.kind == fromTime {
		if after, err = adm.ListOffsetsAfterMilli(ctx, o.From.millis, physical); err == nil {
			err = after.Error()
		}
		if err != nil {
			return nil, nil, fmt.Errorf("log tail: offsets of %s after %d ms: %w", physical, o.From.millis, err)
		}
	}
	start, end = map[int32]int64{}, map[int32]int64{}
	ends.Each(func(l kadm.ListedOffset) {
		if o.Partition >= 0 && l.Partition != o.Partition {
			return
		}
		lo := l.Offset
		if s, ok := starts.Lookup(physical, l.Partition); ok {
			lo = s.Offset
		}
		var at int64
		switch o.From.kind {
		case fromStart:
			at = lo
		case fromEnd:
			at = l.Offset
		case fromOffset:
			at = o.From.offset
		case fromRelative:
			at = l.Offset - o.From.offset
		case fromTime:
			at = l.Offset
			if a, ok := after.Lookup(physical, l.Partition); ok && a.Offset >= 0 {
				at = a.Offset
			}
		}
		start[l.Partition] = min(max(at, lo), l.Offset)
		end[l.Partition] = l.Offset
	})
	if len(start) == 0 {
		return nil, nil, fmt.Errorf("log tail: %s has no partition %d", physical, o.Partition)
	}
	return start, end, nil
}
