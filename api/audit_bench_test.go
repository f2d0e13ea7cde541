package api

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/events/eventstest"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// The audit guarantee (design.md invariant 5) can rest on a synchronous
// produce (acks=all) before answering, or on a local Pebble outbox (fsync)
// drained to Kafka later. These benchmarks measure the durability step of
// each on the same decision record; see README "Audit log" for the choice.
//
//	PDR_TEST_BROKERS=127.0.0.1:39092 go test ./api -run '^$' -bench Audit -benchtime 2000x

func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

func auditRecordBytes(b *testing.B) (*kgo.Record, []byte) {
	rec := eventstest.Decision(4, 2, 256)
	r, err := events.NewRecord(events.Names{Prefix: "bench."}, []byte("decode-1"), rec)
	if err != nil {
		b.Fatal(err)
	}
	return r, r.Value
}

func BenchmarkAuditKafkaSync(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	prefix := kafkatest.Prefix(b)
	kafkatest.Migrate(b, brokers, prefix)
	cl := kafkatest.Client(b, brokers, GroupLogClientOpts()...)
	log := NewGroupLog(cl, events.Names{Prefix: prefix}, 64<<20, nil)
	tmpl, _ := auditRecordBytes(b)
	for _, conc := range []int{1, 16} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			lat := make([]time.Duration, b.N)
			var next atomic.Int64
			b.SetParallelism(conc)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := *tmpl
					r.Topic = prefix + "decisions"
					start := time.Now()
					if _, err := log.Append(context.Background(), &r); err != nil {
						b.Error(err)
						return
					}
					lat[next.Add(1)-1] = time.Since(start)
				}
			})
			reportLatency(b, lat[:next.Load()])
		})
	}
}

func BenchmarkAuditPebbleOutboxSync(b *testing.B) {
	db, err := pebble.Open(b.TempDir(), &pebble.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	_, val := auditRecordBytes(b)
	for _, conc := range []int{1, 16} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			lat := make([]time.Duration, b.N)
			var next atomic.Int64
			b.SetParallelism(conc)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := make([]byte, 8)
				for pb.Next() {
					i := next.Add(1) - 1
					key = fmt.Appendf(key[:0], "%016x", i)
					start := time.Now()
					if err := db.Set(key, val, pebble.Sync); err != nil {
						b.Error(err)
						return
					}
					lat[i] = time.Since(start)
				}
			})
			reportLatency(b, lat[:next.Load()])
		})
	}
}
