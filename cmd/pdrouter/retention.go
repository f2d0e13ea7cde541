package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// warnDecisionTopicShort logs decisionTopicShort's warning, if any. It is a
// warning only: the replica serves whatever the topic keeps.
func warnDecisionTopicShort(ctx context.Context, adm *kadm.Client, topic string, keep time.Duration, log *slog.Logger) {
	warnTopicConfig(ctx, "retention", topic, log, func(ctx context.Context) (string, error) {
		return decisionTopicShort(ctx, adm, topic, keep)
	})
}

// warnTopicConfig logs the warning check returns, if any. It tries for
// 30 s, once a second, because a topic just created can be unknown to the
// broker for a moment; it gives up silently when ctx ends (shutdown).
func warnTopicConfig(ctx context.Context, what, topic string, log *slog.Logger, check func(context.Context) (string, error)) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		msg, err := check(cctx)
		if err == nil {
			if msg != "" {
				log.Warn(msg)
			}
			return
		}
		select {
		case <-cctx.Done():
			if ctx.Err() == nil {
				log.Warn("could not read the decisions topic's "+what, "topic", topic, "err", err)
			}
			return
		case <-time.After(time.Second):
		}
	}
}

// decisionTopicShort compares the decisions topic's retention.ms with the
// replica's --decision-retention. A replica keeps only the header of each
// decision and reads the whole record back from the topic (GET
// /v1/decisions, explain), so a topic that deletes records sooner than the
// replica forgets them turns those lookups into 410s for the difference.
// It returns the operator's warning, or "" when the topic keeps records at
// least as long (or forever, retention.ms -1).
func decisionTopicShort(ctx context.Context, adm *kadm.Client, topic string, keep time.Duration) (string, error) {
	v, err := topicConfig(ctx, adm, topic, "retention.ms")
	if err != nil || v == "" {
		return "", err
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%s: retention.ms %q: %w", topic, v, err)
	}
	if ms < 0 || time.Duration(ms)*time.Millisecond >= keep {
		return "", nil
	}
	return fmt.Sprintf("topic %s keeps records for %s (retention.ms), less than --decision-retention %s: GET /v1/decisions and explain answer 410 for decisions older than %s; raise the topic's retention.ms or lower --decision-retention",
		topic, time.Duration(ms)*time.Millisecond, keep, time.Duration(ms)*time.Millisecond), nil
}

// topicConfig is the value of one config of topic as the broker reports
// it, or "" when the broker reports none.
func topicConfig(ctx context.Context, adm *kadm.Client, topic, key string) (string, error) {
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
		if c.Key == key && c.Value != nil {
			return *c.Value, nil
		}
	}
	return "", nil
}
