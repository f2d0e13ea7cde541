package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// decisionTopicShort compares the decisions topic's retention.ms with the
// replica's --decision-retention. A replica keeps only the header of each
// decision and reads the whole record back from the topic (GET
// /v1/decisions, explain), so a topic that deletes records sooner than the
// replica forgets them turns those lookups into 410s for the difference.
// It returns the operator's warning, or "" when the topic keeps records at
// least as long (or forever, retention.ms -1).
func decisionTopicShort(ctx context.Context, adm *kadm.Client, topic string, keep time.Duration) (string, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return "", err
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		return "", err
	}
	if rc.Err != nil {
		return "", fmt.Errorf("describe %s: %w", topic, rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key != "retention.ms" || c.Value == nil {
			continue
		}
		ms, err := strconv.ParseInt(*c.Value, 10, 64)
		if err != nil {
			return "", fmt.Errorf("%s: retention.ms %q: %w", topic, *c.Value, err)
		}
		if ms < 0 || time.Duration(ms)*time.Millisecond >= keep {
			return "", nil
		}
		return fmt.Sprintf("topic %s keeps records for %s (retention.ms), less than --decision-retention %s: GET /v1/decisions and explain answer 410 for decisions older than %s; raise the topic's retention.ms or lower --decision-retention",
			topic, time.Duration(ms)*time.Millisecond, keep, time.Duration(ms)*time.Millisecond), nil
	}
	return "", nil
}
