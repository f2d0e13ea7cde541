// Package kafkatest gives tests a Kafka to talk to.
//
// Integration tests use the real Apache Kafka broker that `make test` starts
// (scripts/kafka-local.sh) and announces in PDR_TEST_BROKERS. Without it they
// skip locally, and fail under CI=true: CI must never pass by skipping the
// tests that matter. Fake returns an in-process kfake cluster, for fast unit
// tests only.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/migrations"
)

// EnvBrokers names the real test broker.
const EnvBrokers = "PDR_TEST_BROKERS"

// EnvBrokerReady names a file that `make test` writes once the broker it
// starts in the background has started ("ok") or failed (the reason). The Go
// tests start while the broker is still starting, so that the compilation and
// the unit tests overlap the broker's start-up; an integration test waits for
// the file, up to brokerReadyWait, before it talks to the broker.
const EnvBrokerReady = "PDR_TEST_BROKER_READY"

// brokerReadyWait bounds the wait for EnvBrokerReady: a fresh machine
// resolves the broker's jars from Maven Central before it starts it.
const brokerReadyWait = 10 * time.Minute

// Brokers returns the real broker's addresses, after checking it answers.
func Brokers(t testing.TB) []string {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(EnvBrokers))
	if v == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set under CI=true: integration tests must run against the real broker (run `make test`)", EnvBrokers)
		}
		t.Skipf("%s not set: run `make test`, which starts a real Kafka broker, to run this integration test", EnvBrokers)
	}
	if err := awaitBrokerStart(os.Getenv(EnvBrokerReady), brokerReadyWait, 250*time.Millisecond); err != nil {
		t.Fatalf("the test broker at %s=%s: %v", EnvBrokers, v, err)
	}
	brokers := strings.Split(v, ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("client for %s=%s: %v", EnvBrokers, v, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).BrokerMetadata(ctx); err != nil {
		t.Fatalf("the test broker at %s=%s does not answer: %v", EnvBrokers, v, err)
	}
	return brokers
}

// awaitBrokerStart waits until the file at path says how the broker's start
// went: nil for "ok", the file's text as an error otherwise, and an error
// when nothing was written within wait. An empty path means nobody is
// starting a broker: nothing to wait for.
func awaitBrokerStart(path string, wait, poll time.Duration) error {
	if path == "" {
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 {
			if msg := strings.TrimSpace(string(b)); msg != "ok" {
				return fmt.Errorf("the broker did not start: %s", msg)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the broker was still starting after %s (%s=%s is empty)", wait, EnvBrokerReady, path)
		}
		time.Sleep(poll)
	}
}

// Fake starts an in-process kfake cluster with one broker, closed at the end
// of the test.
func Fake(t testing.TB) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// Prefix returns a topic prefix unique to this test run, so tests sharing a
// broker never see each other's records.
func Prefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	if len(name) > 60 {
		name = name[:60]
	}
	return "t-" + name + "-" + hex.EncodeToString(b[:]) + "."
}

// Migrate creates pdrouter's topics under prefix on a single-node cluster
// and deletes them when the test ends.
//
// The topics keep their records forever (retention.ms -1) instead of the
// declared retention: tests write fixed, historical event times (replay's
// fixtures start in May 2026) and stamp records with them, and the broker
// deletes a segment once its newest timestamp is past retention, whatever
// its age on disk. scripts/kafka-local.sh checks retention every 10 s, so
// such records vanished mid-test: CI once saw a test's whole load topic
// deleted ("log retention time 86400000ms breach") between two replicas
// reading it.
func Migrate(t testing.TB, brokers []string, prefix string) {
	t.Helper()
	MigratePartitions(t, brokers, prefix, nil)
}

// MigratePartitions is Migrate with the partition counts of some topics
// overridden (migrations.Options.Partitions).
func MigratePartitions(t testing.TB, brokers []string, prefix string, partitions map[events.Topic]int32) {
	t.Helper()
	o := migrations.SingleNodeOptions(prefix)
	o.Partitions = partitions
	specs, err := migrations.Declarations(o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range specs {
		if _, ok := specs[i].Configs["retention.ms"]; ok {
			specs[i].Configs["retention.ms"] = "-1"
		}
	}
	cl := Client(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := migrations.Apply(ctx, cl, specs, false); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	t.Cleanup(func() { DeleteTopics(t, brokers, prefix) })
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	WaitTopics(t, cl, names...)
}

// WaitTopics waits, up to 30 s, until every partition of the topics has a
// leader that answers (migrations.WaitUsable): a real broker applies topic
// creation through its controller, so a topic can be unknown for a moment
// after CreateTopics returned.
func WaitTopics(t testing.TB, cl *kgo.Client, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.WaitUsable(ctx, cl, topics...); err != nil {
		t.Fatalf("topics %v not ready after 30s: %v", topics, err)
	}
}

// SetTopicConfig sets config key of topic to value and waits, up to 30 s,
// until the broker itself describes the new value: the controller applies
// an alter at once, but a broker serves it only once the metadata reaches
// it, so a test that relies on the value right after the alter races it.
func SetTopicConfig(t testing.TB, brokers []string, topic, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(Client(t, brokers))
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: &value}}, topic)
	if err == nil {
		var r kadm.AlterConfigsResponse
		if r, err = rs.On(topic, nil); err == nil {
			err = r.Err
		}
	}
	if err != nil {
		t.Fatalf("set %s of %s to %s: %v", key, topic, value, err)
	}
	for {
		rcs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err == nil {
			if rc, err := rcs.On(topic, nil); err == nil && rc.Err == nil {
				for _, c := range rc.Configs {
					if c.Key == key && c.Value != nil && *c.Value == value {
						return
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the broker does not describe %s=%s on %s after 30s: %v", key, value, topic, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// DeleteTopics removes every pdrouter topic under prefix.
func DeleteTopics(t testing.TB, brokers []string, prefix string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return
	}
	defer cl.Close()
	names := events.Names{Prefix: prefix}
	var ts []string
	for _, tp := range events.AllTopics {
		ts = append(ts, names.Physical(tp))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).DeleteTopics(ctx, ts...); err != nil {
		t.Logf("delete topics under %s: %v", prefix, err)
	}
}

// ReadAll returns every record of topic, from the start up to its end
// offsets as they are when it is called. Reading to known offsets, not
// until the topic seems quiet, cannot stop early when the first fetch is
// slow (a loaded CI machine) nor wait on records that will never come. It
// fails the test if they are not all read within a minute.
func ReadAll(t testing.TB, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends, err := kadm.NewClient(Client(t, brokers)).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	left := map[int32]int64{} // partition → end offset still to reach
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	cl := Client(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var out []*kgo.Record
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: partitions %v (partition → end offset) not read to their end within a minute", topic, left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	return out
}

// Client returns a franz-go client closed at the end of the test.
func Client(t testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Both runs fn once against kfake and once against the real broker, as
// subtests "kfake" and "kafka". Behaviour that differs between the two is a
// kfake quirk to know about, or a bug in pdrouter to fix.
func Both(t *testing.T, fn func(t *testing.T, brokers []string)) {
	t.Run("kfake", func(t *testing.T) { fn(t, Fake(t)) })
	t.Run("kafka", func(t *testing.T) { fn(t, Brokers(t)) })
}
