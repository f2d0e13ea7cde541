package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// topicKeeping creates a one-partition topic under prefix with this
// retention.ms, deleted at the end of the test, and waits until it answers.
func topicKeeping(t *testing.T, cl *kgo.Client, prefix, retentionMS string) string {
	t.Helper()
	adm := kadm.NewClient(cl)
	topic := prefix + "decisions-" + strings.TrimPrefix(retentionMS, "-")
	if _, err := adm.CreateTopic(context.Background(), 1, 1, map[string]*string{"retention.ms": kadm.StringPtr(retentionMS)}, topic); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })
	kafkatest.WaitTopics(t, cl, topic)
	return topic
}

// TestDecisionTopicShort: a decisions topic that deletes records before the
// replica forgets their headers is reported with both durations; one that
// keeps them as long, longer or forever is not.
func TestDecisionTopicShort(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		cl := kafkatest.Client(t, brokers)
		adm := kadm.NewClient(cl)
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
			topic := topicKeeping(t, cl, prefix, tc.retentionMS)
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

// TestWarnDecisionTopicShort: warnDecisionTopicShort logs the warning once for a short topic, and
// nothing for a topic that keeps records long enough.
func TestWarnDecisionTopicShort(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		cl := kafkatest.Client(t, brokers)
		adm := kadm.NewClient(cl)
		prefix := kafkatest.Prefix(t)
		for _, tc := range []struct {
			retentionMS string
			warn        bool
		}{{"3600000", true}, {"-1", false}} {
			topic := topicKeeping(t, cl, prefix, tc.retentionMS)
			var buf bytes.Buffer
			warnDecisionTopicShort(context.Background(), adm, topic, 24*time.Hour, slog.New(slog.NewTextHandler(&buf, nil)))
			if got := strings.Count(buf.String(), "level=WARN"); got != map[bool]int{true: 1}[tc.warn] {
				t.Fatalf("retention.ms %s: %d warnings, want warn=%v: %s", tc.retentionMS, got, tc.warn, buf.String())
			}
			if tc.warn && !strings.Contains(buf.String(), "410") {
				t.Fatalf("the warning does not say what fails: %s", buf.String())
			}
		}
	})
}
