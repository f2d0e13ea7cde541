package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/replay"
)

// A rebuild reads the bounds of the topics a decision's watermark names,
// and no other: a deployment that has not created a topic no store applies
// (forwards, which only replicas of --load-deltas snapshots need) still
// has its decisions' states checked.
func TestStateCheckWithoutTheForwardsTopic(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	r := fleetReplica(t, brokers, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(kafkatest.Client(t, brokers)).DeleteTopics(ctx, r.names.Physical(events.TopicForwards)); err != nil {
		t.Fatal(err)
	}
	a := r.route("alone", promptOf(0, 64*16, 100, 1))
	r.catchUp()
	rec := byID(readDecisions(t, brokers, r.names, 1))[a.DecisionID]
	checker := &replay.KafkaStateChecker{Client: r.conn, Names: r.names, TempDir: t.TempDir()}
	if s := checker.CheckState(ctx, rec); !s.Performed || s.Error != "" || !s.Identical {
		t.Fatalf("the state check on a deployment without forwards: %+v", s)
	}
}
