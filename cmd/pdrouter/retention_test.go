package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestDecisionTopicShort: a decisions topic that deletes records before the
// replica forgets their headers is reported with both durations; one that
// keeps them as long, longer or forever is not.
func TestDecisionTopicShort(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		adm := kadm.NewClient(kafkatest.Client(t, brokers))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		prefix := kafkatest.Prefix(t)
		for _, tc := range []struct {
			retentionMS string
			keep        time.Duration
			warn        bool
		}{
			{"3600000", 24 * time.Hour, true},
			{"86400000", 24 * time.Hour, false},
			{"2592000000", 24 * time.Hour, false},
			{"-1", 24 * time.Hour, false},
		} {
			topic := prefix + "decisions-" + strings.TrimPrefix(tc.retentionMS, "-")
			if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": kadm.StringPtr(tc.retentionMS)}, topic); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })
			kafkatest.WaitTopics(t, adm, topic)
			msg, err := decisionTopicShort(ctx, adm, topic, tc.keep)
			if err != nil {
				t.Fatalf("retention.ms %s: %v", tc.retentionMS, err)
			}
			if got := msg != ""; got != tc.warn {
				t.Fatalf("retention.ms %s, keep %s: warned %v (%q), want %v", tc.retentionMS, tc.keep, got, msg, tc.warn)
			}
			if tc.warn && (!strings.Contains(msg, "1h0m0s") || !strings.Contains(msg, "24h0m0s") || !strings.Contains(msg, "410")) {
				t.Fatalf("the warning does not give both durations and the consequence: %s", msg)
			}
		}
		if _, err := decisionTopicShort(ctx, adm, prefix+"missing", time.Hour); err == nil {
			t.Fatal("a missing topic was not an error")
		}
	})
}
