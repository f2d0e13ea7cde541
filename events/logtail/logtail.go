// Package logtail decodes any pdrouter topic to JSON lines: the first tool an
// operator reaches for when a decision looks wrong.
package logtail

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/pdrouter/pdrouter/events"
)

// Options select what to read.
type Options struct {
	Names events.Names
	Topic events.Topic
	// Partition to read; -1 for all.
	Partition int32
	// From is where to begin in each partition.
	From From
	// Follow keeps reading new records; without it Tail stops at the end
	// offsets it saw when it began.
	Follow bool
	// Max stops after this many records (0: no limit).
	Max int
}

// Stats summarize a tail.
type Stats struct {
	Records int
	Invalid int
}

// Line is one JSON output line. Value is the protobuf JSON mapping of the
// record (proto field names, 64-bit integers as strings).
type Line struct {
	Topic     string          `json:"topic"`
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	Timestamp string          `json:"timestamp"`
	Key       string          `json:"key,omitempty"`
	Schema    string          `json:"schema,omitempty"`
	Tombstone bool            `json:"tombstone,omitempty"`
	Value     json.RawMessage `json:"value,omitempty"`
	// Error is set, and Raw holds the value in base64, when the record
	// could not be decoded.
	Error string `json:"error,omitempty"`
	Raw   string `json:"raw,omitempty"`
}

var pj = protojson.MarshalOptions{UseProtoNames: true}

// Tail reads records from the topic through a client built from connOpts and
// writes one JSON line per record to w. Undecodable records are written with
// an error and counted in metrics; the tail goes on.
func Tail(ctx context.Context, connOpts []kgo.Opt, o Options, w io.Writer, metrics *events.DecodeMetrics) (Stats, error) {
	var st Stats
	physical := o.Names.Physical(o.Topic)
	startAt, ends, err := resolve(ctx, connOpts, physical, o)
	if err != nil {
		return st, err
	}
	// remaining[p] is the end offset still to reach, for partitions that
	// have records to print.
	remaining := map[int32]int64{}
	start := map[int32]kgo.Offset{}
	for p, s := range startAt {
		start[p] = kgo.NewOffset().At(s)
		if o.Follow || s < ends[p] {
			remaining[p] = ends[p]
		}
	}
	cl, err := kgo.NewClient(append(connOpts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{physical: start}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		return st, err
	}
	defer cl.Close()
	done := func(p int32, next int64) {
		if !o.Follow && next >= remaining[p] {
			delete(remaining, p)
		}
	}
	enc := json.NewEncoder(w)
	for o.Follow || len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return st, nil
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("log tail: fetch %s/%d: %w", t, p, err) })
		if ferr != nil {
			return st, ferr
		}
		recs := fs.Records()
		sort.SliceStable(recs, func(i, j int) bool { return recs[i].Partition < recs[j].Partition })
		for _, r := range recs {
			line := render(o.Names, r, metrics, &st)
			if err := enc.Encode(line); err != nil {
				return st, err
			}
			done(r.Partition, r.Offset+1)
			if o.Max > 0 && st.Records >= o.Max {
				return st, nil
			}
		}
	}
	return st, nil
}

func render(names events.Names, r *kgo.Record, metrics *events.DecodeMetrics, st *Stats) Line {
	st.Records++
	line := Line{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Timestamp: r.Timestamp.UTC().Format(time.RFC3339Nano), Key: string(r.Key)}
	env, err := events.Decode(names, r)
	if metrics != nil {
		metrics.Observe(names, r.Topic, err)
	}
	if err != nil {
		st.Invalid++
		line.Error = err.Error()
		line.Raw = base64.StdEncoding.EncodeToString(r.Value)
		return line
	}
	if env.Tombstone() {
		line.Tombstone = true
		return line
	}
	line.Schema = env.Schema
	b, err := pj.Marshal(env.Message)
	if err != nil {
		line.Error = err.Error()
		return line
	}
	line.Value = b
	return line
}
