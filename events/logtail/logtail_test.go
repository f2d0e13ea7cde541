package logtail_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/events/eventstest"
	"github.com/pdrouter/pdrouter/events/logtail"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestTailSkipsBadRecordsAndCountsThem: garbage and unknown-schema records
// between good ones are printed with their error, counted in the metric, and
// the tail goes on to the good records after them.
func TestTailSkipsBadRecordsAndCountsThem(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		kafkatest.Migrate(t, brokers, prefix)
		n := events.Names{Prefix: prefix}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		good, err := events.NewRecord(n, []byte("decode-1"), eventstest.OneBlockStored())
		if err != nil {
			t.Fatal(err)
		}
		topic := n.Physical(events.TopicKvEvents)
		p := func(r kgo.Record) *kgo.Record { r.Topic, r.Partition = topic, 0; return &r }
		cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		recs := []*kgo.Record{
			p(*good),
			p(kgo.Record{Key: []byte("x"), Value: []byte("not protobuf \xff\xff"), Headers: good.Headers}),
			p(kgo.Record{Key: []byte("x"), Value: good.Value, Headers: []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte("pdrouter.events.v7.KvEventRecord")}}}),
			p(*good),
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		m := events.NewDecodeMetrics(reg)
		var out bytes.Buffer
		from, _ := logtail.ParseFromOffset("start")
		st, err := logtail.Tail(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, logtail.Options{
			Names: n, Topic: events.TopicKvEvents, Partition: -1, From: from}, &out, m)
		if err != nil {
			t.Fatal(err)
		}
		if st.Records != 4 || st.Invalid != 2 {
			t.Fatalf("stats %+v, want 4 records, 2 invalid\n%s", st, out.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 4 {
			t.Fatalf("%d lines:\n%s", len(lines), out.String())
		}
		var ls [4]logtail.Line
		for i, l := range lines {
			if err := json.Unmarshal([]byte(l), &ls[i]); err != nil {
				t.Fatalf("line %d is not JSON: %v", i, err)
			}
			if ls[i].Offset != int64(i) {
				t.Fatalf("line %d has offset %d", i, ls[i].Offset)
			}
		}
		if ls[0].Error != "" || ls[3].Error != "" || !strings.Contains(string(ls[0].Value), `"worker_id":"decode-1"`) {
			t.Errorf("good records: %s / %s", lines[0], lines[3])
		}
		if !strings.Contains(ls[1].Error, "malformed") || ls[1].Raw == "" {
			t.Errorf("garbage record: %s", lines[1])
		}
		if !strings.Contains(ls[2].Error, "unknown_schema") || !strings.Contains(ls[2].Error, "/0@2") {
			t.Errorf("unknown schema record: %s", lines[2])
		}
		if v := testutil.ToFloat64(m.Invalid.WithLabelValues("kv-events", "malformed")); v != 1 {
			t.Errorf("invalid{malformed} = %v", v)
		}
		if v := testutil.ToFloat64(m.Invalid.WithLabelValues("kv-events", "unknown_schema")); v != 1 {
			t.Errorf("invalid{unknown_schema} = %v", v)
		}
		if v := testutil.ToFloat64(m.Decoded.WithLabelValues("kv-events")); v != 2 {
			t.Errorf("decoded = %v", v)
		}

		// --from-offset -1 prints only the last record; an idle partition
		// does not make the tail wait.
		out.Reset()
		last, _ := logtail.ParseFromOffset("-1")
		st, err = logtail.Tail(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, logtail.Options{
			Names: n, Topic: events.TopicKvEvents, Partition: -1, From: last}, &out, nil)
		if err != nil || st.Records != 1 || !strings.Contains(out.String(), `"offset":3`) {
			t.Fatalf("tail -1: %+v %v\n%s", st, err, out.String())
		}
		// An empty topic ends at once.
		st, err = logtail.Tail(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, logtail.Options{
			Names: n, Topic: events.TopicOutcomes, Partition: -1, From: from}, &out, nil)
		if err != nil || st.Records != 0 {
			t.Fatalf("empty topic: %+v %v", st, err)
		}
	})
}

func TestParseFrom(t *testing.T) {
	for _, bad := range []string{"begin", "1.5", "--3"} {
		if _, err := logtail.ParseFromOffset(bad); err == nil || !strings.Contains(err.Error(), "--from-offset") {
			t.Errorf("ParseFromOffset(%q): %v", bad, err)
		}
	}
	if _, err := logtail.ParseFromTime("yesterday"); err == nil || !strings.Contains(err.Error(), "RFC 3339") {
		t.Errorf("ParseFromTime: %v", err)
	}
	for _, ok := range []string{"2026-11-29T10:00:00Z", "1764400000000"} {
		if _, err := logtail.ParseFromTime(ok); err != nil {
			t.Errorf("ParseFromTime(%q): %v", ok, err)
		}
	}
}
