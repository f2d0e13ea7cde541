package events

import (
	"fmt"
	"strings"
)

// Topic is a logical topic name, without the deployment's prefix. Watermarks
// and decision records always use logical names, so they stay meaningful when
// a log is copied under another prefix.
type Topic string

// The topics of design.md. Their partition counts and configs are
// declared once, in package migrations.
const (
	TopicKvEvents  Topic = "kv-events"
	TopicLoad      Topic = "load"
	TopicWorkers   Topic = "workers"
	TopicDecisions Topic = "decisions"
	TopicOutcomes  Topic = "outcomes"
	// TopicLoadDeltas carries each replica's compact load deltas
	// (loaddelta.go): what peers apply instead of whole decisions and
	// outcomes when the group shares load that way (docs/scaling.md).
	TopicLoadDeltas Topic = "load-deltas"
	// TopicLoadShares carries each replica's load as snapshots
	// (loadshares.go): per group commit, the absolute shares of its own
	// live requests on the workers whose share changed, keyed by the
	// replica. Peers of source load-shares keep one row per (replica,
	// worker) from it instead of a fact per request (docs/scaling.md).
	TopicLoadShares Topic = "load-shares"
	// TopicForwards carries lifecycle events posted to a replica of
	// snapshots that holds no decision for the request (ForwardedEvent),
	// keyed by the request id. Every such replica reads it whole, and the
	// one that decided the request applies the event (docs/scaling.md).
	TopicForwards Topic = "forwards"
)

// AllTopics lists every topic in a fixed order. Code that walks topics uses
// this slice, never a map, so its output does not depend on map order.
var AllTopics = []Topic{TopicKvEvents, TopicLoad, TopicWorkers, TopicDecisions, TopicOutcomes, TopicLoadDeltas, TopicLoadShares, TopicForwards}

// ParseTopic accepts a logical topic name.
func ParseTopic(s string) (Topic, error) {
	for _, t := range AllTopics {
		if string(t) == s {
			return t, nil
		}
	}
	names := make([]string, len(AllTopics))
	for i, t := range AllTopics {
		names[i] = string(t)
	}
	return "", fmt.Errorf("unknown topic %q: want one of %s", s, strings.Join(names, ", "))
}

// Names maps logical topics to the physical names of one deployment. The
// zero value (no prefix) uses logical names as they are.
type Names struct {
	Prefix string
}

// Physical returns the Kafka topic name of t.
func (n Names) Physical(t Topic) string { return n.Prefix + string(t) }

// Logical maps a physical Kafka topic name back to its logical topic.
func (n Names) Logical(physical string) (Topic, bool) {
	if !strings.HasPrefix(physical, n.Prefix) {
		return "", false
	}
	t, err := ParseTopic(physical[len(n.Prefix):])
	return t, err == nil
}

// ValidatePrefix rejects prefixes that would produce illegal Kafka topic
// names. Kafka allows [a-zA-Z0-9._-] and at most 249 characters.
func ValidatePrefix(prefix string) error {
	if len(prefix) > 200 {
		return fmt.Errorf("--topic-prefix is %d characters long: at most 200 are allowed", len(prefix))
	}
	for i, r := range prefix {
		ok := r == '.' || r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return fmt.Errorf("--topic-prefix %q has %q at byte %d: only letters, digits, '.', '_' and '-' are allowed", prefix, r, i)
		}
	}
	return nil
}
