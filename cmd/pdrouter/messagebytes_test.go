package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestDecisionTopicSmall: a decisions topic whose max.message.bytes is
// below --decision-record-max-bytes (plus framing) is reported with both
// sizes; the broker's default takes the default budget.
func TestDecisionTopicSmall(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		cl := kafkatest.Client(t, brokers)
		adm := kadm.NewClient(cl)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		prefix := kafkatest.Prefix(t)
		small := prefix + "decisions-small"
		if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("262144")}, small); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), small) })
		dflt := prefix + "decisions-default"
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, dflt); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), dflt) })
		kafkatest.WaitTopics(t, cl, small, dflt)

		msg, err := decisionTopicSmall(ctx, adm, small, api.DefaultDecisionRecordMaxBytes)
		if err != nil || !strings.Contains(msg, "262144") || !strings.Contains(msg, "524288") || !strings.Contains(msg, "max.message.bytes") {
			t.Fatalf("topic of 256 KiB, budget 512 KiB: %q, %v", msg, err)
		}
		if msg, err := decisionTopicSmall(ctx, adm, small, 200<<10); err != nil || msg != "" {
			t.Fatalf("topic of 256 KiB, budget 200 KiB: %q, %v", msg, err)
		}
		if msg, err := decisionTopicSmall(ctx, adm, dflt, api.DefaultDecisionRecordMaxBytes); err != nil || msg != "" {
			t.Fatalf("default topic, default budget: %q, %v", msg, err)
		}
	})
}
