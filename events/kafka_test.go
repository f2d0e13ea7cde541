package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/events/eventstest"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestEveryEventTypeRoundTripsThroughTheBroker writes one record of every
// schema, every KV event kind and a tombstone, reads them back from every
// partition, and checks each decodes to exactly what was written.
func TestEveryEventTypeRoundTripsThroughTheBroker(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		kafkatest.Migrate(t, brokers, prefix)
		n := events.Names{Prefix: prefix}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		prod := kafkatest.Client(t, brokers, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
		want := map[events.Topic]proto.Message{}
		var recs []*kgo.Record
		for _, s := range eventstest.All() {
			r, err := events.NewRecord(n, s.Key, s.Msg)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
			want[events.Topic(s.Name)] = s.Msg
		}
		recs = append(recs, events.NewTombstone(n, "decode-9"))
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}

		var topics []string
		for _, tp := range events.AllTopics {
			topics = append(topics, n.Physical(tp))
		}
		cons := kafkatest.Client(t, brokers, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := map[events.Topic]proto.Message{}
		tombstones := 0
		for len(got) < len(want) || tombstones == 0 {
			fs := cons.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				t.Fatalf("timed out with %d of %d records: %v", len(got), len(want), err)
			}
			for _, r := range fs.Records() {
				env, err := events.Decode(n, r)
				if err != nil {
					t.Fatalf("decode %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
				}
				if env.Tombstone() {
					tombstones++
					if string(env.Key) != "decode-9" {
						t.Fatalf("tombstone key %q", env.Key)
					}
					continue
				}
				got[env.Topic] = env.Message
			}
		}
		for tp, w := range want {
			if !proto.Equal(got[tp], w) {
				t.Errorf("%s: read back\n%v\nwant\n%v", tp, got[tp], w)
			}
		}
	})
}
