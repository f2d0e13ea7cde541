package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
)

// recordFraming is what a record batch adds around one decision record's
// value on the broker: the batch and record headers, the key (a worker id)
// and the pdr-schema header. A generous bound: the real figure is ~150 B.
const recordFraming = 1 << 10

// warnDecisionTopicSmall logs decisionTopicSmall's warning, if any. It is a
// warning only: decisions whose record fits the topic are still answered.
func warnDecisionTopicSmall(ctx context.Context, adm *kadm.Client, topic string, maxBytes int, log *slog.Logger) {
	warnTopicConfig(ctx, "max.message.bytes", topic, log, func(ctx context.Context) (string, error) {
		return decisionTopicSmall(ctx, adm, topic, maxBytes)
	})
}

// decisionTopicSmall compares the decisions topic's max.message.bytes with
// the replica's --decision-record-max-bytes. The replica bounds every
// decision record by the flag, so that the broker never refuses one; a
// topic that takes less than that refuses the largest records on every
// retry, and those decisions are answered 503 for good. It returns the
// operator's warning, or "" when the topic takes records of the budget.
func decisionTopicSmall(ctx context.Context, adm *kadm.Client, topic string, maxBytes int) (string, error) {
	v, err := topicConfig(ctx, adm, topic, "max.message.bytes")
	if err != nil || v == "" {
		return "", err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%s: max.message.bytes %q: %w", topic, v, err)
	}
	if n >= int64(maxBytes)+recordFraming {
		return "", nil
	}
	return fmt.Sprintf("topic %s takes record batches of at most %d bytes (max.message.bytes), less than --decision-record-max-bytes %d plus %d bytes of framing: the broker refuses the largest decision records on every retry and those decisions are answered 503; raise the topic's max.message.bytes or lower --decision-record-max-bytes",
		topic, n, maxBytes, recordFraming), nil
}
