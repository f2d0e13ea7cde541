// Package migrations declares everything pdrouter needs to exist before it
// runs: the Kafka topics with their partitions and configs, and the schema
// version of the local Pebble store.
//
// Topics are declared here and nowhere else. `pdrouter migrate` creates what
// is missing and reports what differs as drift; it never deletes or alters an
// existing topic, because a topic's partitions decide where every worker's
// history lives (design.md, Topics) and changing them silently would reorder
// that history.
package migrations

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/pdrouter/pdrouter/events"
)

// TopicSpec is the declaration of one topic.
type TopicSpec struct {
	Topic events.Topic
	// Name is the physical name, prefix included.
	Name              string
	Partitions        int32
	ReplicationFactor int16
	// Configs holds every topic config pdrouter relies on; drift is reported
	// only for these keys.
	Configs map[string]string
}

// Options shape the declarations for one deployment.
type Options struct {
	// Prefix is prepended to every topic name.
	Prefix string
	// ReplicationFactor of new topics. Production wants 3; a single test
	// broker needs 1.
	ReplicationFactor int16
	// MinInsyncReplicas is min.insync.replicas of every topic. With acks=all
	// (franz-go's default) a write is durable on this many replicas before it
	// is acknowledged, which is what the audit guarantee rests on.
	MinInsyncReplicas int
	// Partitions overrides the default partition count per topic.
	Partitions map[events.Topic]int32
}

// DefaultOptions are production defaults.
func DefaultOptions() Options {
	return Options{ReplicationFactor: 3, MinInsyncReplicas: 2}
}

// SingleNodeOptions suit a one-broker cluster: the dev broker and tests.
func SingleNodeOptions(prefix string) Options {
	return Options{Prefix: prefix, ReplicationFactor: 1, MinInsyncReplicas: 1}
}

const day = 24 * time.Hour

// defaults per topic. Partition counts bound the parallelism of consumers and
// of the broker, not of pdrouter's replicas (each replica reads everything).
var defaults = []struct {
	topic      events.Topic
	partitions int32
	cleanup    string
	retention  time.Duration // 0 for compacted topics
}{
	// Retention of kv-events is bounded by snapshots: a replica older than
	// this bootstraps from a peer's snapshot instead of the log.
	{events.TopicKvEvents, 16, "delete", 7 * day},
	{events.TopicLoad, 8, "delete", 1 * day},
	{events.TopicWorkers, 4, "compact", 0},
	{events.TopicDecisions, 16, "delete", 30 * day},
	{events.TopicOutcomes, 16, "delete", 30 * day},
	// Load deltas are read back by replicas only while the requests they
	// describe may be active, and replayed by a rebuild from a snapshot:
	// kv-events' bound serves both. 16 partitions like decisions, so a
	// cell count that divides one divides the other.
	{events.TopicLoadDeltas, 16, "delete", 7 * day},
	// Load shares are keyed by writer, so 4 partitions serve a group of
	// any size. A live writer repeats a worker's nonzero share within half
	// an active expiry (300 s by default), so a peer that reads the last
	// hour holds every live row: replicas read the topic from its start at
	// every open instead of storing the rows.
	{events.TopicLoadShares, 4, "delete", time.Hour},
	// Forwarded lifecycle events are keyed by request id and read whole
	// by every replica of snapshots, which resumes from its committed
	// offsets: an hour outlasts any restart that still finds the request
	// open (--router-active-request-expiry, 300 s by default), and bounds
	// what a replica with new offsets reads from the start.
	{events.TopicForwards, 4, "delete", time.Hour},
}

// Declarations returns the declared topics in a fixed order.
func Declarations(o Options) ([]TopicSpec, error) {
	if err := events.ValidatePrefix(o.Prefix); err != nil {
		return nil, err
	}
	if o.ReplicationFactor < 1 {
		return nil, fmt.Errorf("--replication-factor %d: must be at least 1", o.ReplicationFactor)
	}
	if o.MinInsyncReplicas < 1 || o.MinInsyncReplicas > int(o.ReplicationFactor) {
		return nil, fmt.Errorf("--min-insync-replicas %d: must be in [1, --replication-factor=%d]", o.MinInsyncReplicas, o.ReplicationFactor)
	}
	names := events.Names{Prefix: o.Prefix}
	out := make([]TopicSpec, 0, len(defaults))
	for _, d := range defaults {
		p := d.partitions
		if v, ok := o.Partitions[d.topic]; ok {
			if v < 1 || v > 10000 {
				return nil, fmt.Errorf("--partitions %s=%d: must be in [1, 10000]", d.topic, v)
			}
			p = v
		}
		cfg := map[string]string{
			"cleanup.policy":      d.cleanup,
			"min.insync.replicas": strconv.Itoa(o.MinInsyncReplicas),
			// Records are protobuf; let producers choose the codec.
			"compression.type": "producer",
		}
		if d.retention > 0 {
			cfg["retention.ms"] = strconv.FormatInt(d.retention.Milliseconds(), 10)
		}
		out = append(out, TopicSpec{
			Topic: d.topic, Name: names.Physical(d.topic),
			Partitions: p, ReplicationFactor: o.ReplicationFactor, Configs: cfg,
		})
	}
	for t := range o.Partitions {
		if _, err := events.ParseTopic(string(t)); err != nil {
			return nil, fmt.Errorf("--partitions: %w", err)
		}
	}
	return out, nil
}

// SortedKeys returns m's keys in order, for output that does not depend on
// map order.
func SortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
