package migrations_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/migrations"
)

func TestDeclarationsCoverEveryTopic(t *testing.T) {
	specs, err := migrations.Declarations(migrations.Options{Prefix: "p.", ReplicationFactor: 3, MinInsyncReplicas: 2,
		Partitions: map[events.Topic]int32{events.TopicKvEvents: 32}})
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != len(events.AllTopics) {
		t.Fatalf("%d declarations for %d topics", len(specs), len(events.AllTopics))
	}
	for i, s := range specs {
		if s.Topic != events.AllTopics[i] || s.Name != "p."+string(s.Topic) {
			t.Errorf("declaration %d is %s (%s)", i, s.Topic, s.Name)
		}
		for _, k := range []string{"cleanup.policy", "min.insync.replicas"} {
			if s.Configs[k] == "" {
				t.Errorf("%s: %s not declared", s.Name, k)
			}
		}
		if s.Configs["min.insync.replicas"] != "2" || s.ReplicationFactor != 3 {
			t.Errorf("%s: options not applied", s.Name)
		}
		if compacted := s.Topic == events.TopicWorkers; compacted != (s.Configs["cleanup.policy"] == "compact") {
			t.Errorf("%s: cleanup.policy %s", s.Name, s.Configs["cleanup.policy"])
		}
		if s.Configs["cleanup.policy"] == "delete" && s.Configs["retention.ms"] == "" {
			t.Errorf("%s: delete topic without retention.ms", s.Name)
		}
	}
	if specs[0].Partitions != 32 {
		t.Errorf("partition override ignored: %d", specs[0].Partitions)
	}
}

func TestDeclarationsRejectBadOptions(t *testing.T) {
	cases := map[string]struct {
		o    migrations.Options
		want string
	}{
		"rf 0":            {migrations.Options{MinInsyncReplicas: 1}, "--replication-factor 0"},
		"isr above rf":    {migrations.Options{ReplicationFactor: 1, MinInsyncReplicas: 2}, "--min-insync-replicas 2: must be in [1, --replication-factor=1]"},
		"bad prefix":      {migrations.Options{Prefix: "a b", ReplicationFactor: 1, MinInsyncReplicas: 1}, "--topic-prefix"},
		"zero partitions": {migrations.Options{ReplicationFactor: 1, MinInsyncReplicas: 1, Partitions: map[events.Topic]int32{events.TopicLoad: 0}}, "--partitions load=0"},
		"unknown topic":   {migrations.Options{ReplicationFactor: 1, MinInsyncReplicas: 1, Partitions: map[events.Topic]int32{"lod": 3}}, "unknown topic \"lod\""},
	}
	for name, c := range cases {
		_, err := migrations.Declarations(c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to say %q", name, err, c.want)
		}
	}
}

// migrateSetup gives a test its topic prefix (deleted when it ends), a
// client and its admin client, a context for its migrations and the
// declared topics.
func migrateSetup(t *testing.T, brokers []string) (string, *kgo.Client, *kadm.Client, context.Context, []migrations.TopicSpec) {
	t.Helper()
	prefix := kafkatest.Prefix(t)
	t.Cleanup(func() { kafkatest.DeleteTopics(t, brokers, prefix) })
	cl := kafkatest.Client(t, brokers)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	specs, err := migrations.Declarations(migrations.SingleNodeOptions(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return prefix, cl, adm, ctx, specs
}

// TestMigrateIsIdempotentAndReportsDrift: the first run creates every topic,
// the second changes nothing, and a planted difference is reported exactly
// and left in place.
func TestMigrateIsIdempotentAndReportsDrift(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix, cl, adm, ctx, specs := migrateSetup(t, brokers)

		dry, err := migrations.Apply(ctx, cl, specs, true)
		if err != nil {
			t.Fatal(err)
		}
		if dry.Changed() != len(specs) {
			t.Fatalf("dry run plans %d creates, want %d", dry.Changed(), len(specs))
		}
		if topics, _ := adm.ListTopics(ctx, specs[0].Name); topics[specs[0].Name].Err == nil {
			t.Fatal("dry run created a topic")
		}

		first, err := migrations.Apply(ctx, cl, specs, false)
		if err != nil {
			t.Fatal(err)
		}
		if first.Changed() != len(specs) || first.Drifted() != 0 {
			t.Fatalf("first run: %d created, %d drifted", first.Changed(), first.Drifted())
		}
		second := waitStable(t, ctx, cl, specs)
		if second.Changed() != 0 || second.Drifted() != 0 {
			var b bytes.Buffer
			second.Print(&b)
			t.Fatalf("second run changed something:\n%s", b.String())
		}

		// Plant drift: a shorter retention on decisions, a partition more on load.
		decisions, load := prefix+"decisions", prefix+"load"
		if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("3600000")}}, decisions); err != nil {
			t.Fatal(err)
		}
		if _, err := adm.CreatePartitions(ctx, 1, load); err != nil {
			t.Fatal(err)
		}
		var third migrations.Result
		deadline := time.Now().Add(30 * time.Second)
		for {
			third, err = migrations.Apply(ctx, cl, specs, false)
			if err != nil {
				t.Fatal(err)
			}
			if third.Drifted() == 2 || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond) // metadata propagation
		}
		var out bytes.Buffer
		third.Print(&out)
		report := out.String()
		for _, want := range []string{
			"drift         " + decisions,
			"    drift retention.ms: declared 2592000000, actual 3600000",
			"drift         " + load,
			"    drift partitions: declared 8, actual 9",
			"0 created, 6 unchanged, 2 drifted",
		} {
			if !strings.Contains(report, want) {
				t.Errorf("report lacks %q:\n%s", want, report)
			}
		}
		if third.Changed() != 0 {
			t.Error("a drifted run created topics")
		}
		// Never altered: the drifted values are still there.
		cfgs, err := adm.DescribeTopicConfigs(ctx, decisions)
		if err != nil {
			t.Fatal(err)
		}
		rc, _ := cfgs.On(decisions, nil)
		for _, c := range rc.Configs {
			if c.Key == "retention.ms" && (c.Value == nil || *c.Value != "3600000") {
				t.Errorf("migrate altered retention.ms of %s", decisions)
			}
		}
	})
}

// TestMigrateAddsLoadDeltasToAnExistingDeployment: a deployment made before
// the load-deltas topic existed gains it from migrate, and a load-deltas
// topic made by hand with another layout is drift, reported and left alone.
func TestMigrateAddsLoadDeltasToAnExistingDeployment(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix, cl, adm, ctx, specs := migrateSetup(t, brokers)
		var old []migrations.TopicSpec
		var deltas migrations.TopicSpec
		for _, s := range specs {
			if s.Name == prefix+string(events.TopicLoadDeltas) {
				deltas = s
				continue
			}
			old = append(old, s)
		}
		if deltas.Name == "" || len(old) != len(specs)-1 {
			t.Fatalf("load-deltas is not declared: %+v", specs)
		}
		if _, err := migrations.Apply(ctx, cl, old, false); err != nil {
			t.Fatal(err)
		}
		waitStable(t, ctx, cl, old)
		res, err := migrations.Apply(ctx, cl, specs, false)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		res.Print(&out)
		if res.Changed() != 1 || res.Drifted() != 0 || !strings.Contains(out.String(), "create        "+deltas.Name) {
			t.Fatalf("migrate on a deployment without load-deltas: %d created, %d drifted:\n%s", res.Changed(), res.Drifted(), out.String())
		}
		waitStable(t, ctx, cl, specs)

		// Made by hand with fewer partitions: drift, never altered.
		if _, err := adm.DeleteTopics(ctx, deltas.Name); err != nil {
			t.Fatal(err)
		}
		var created bool
		for deadline := time.Now().Add(30 * time.Second); !created && time.Now().Before(deadline); {
			r, err := adm.CreateTopic(ctx, 4, 1, nil, deltas.Name)
			created = err == nil && r.Err == nil
			if !created {
				time.Sleep(200 * time.Millisecond) // the deletion is still under way
			}
		}
		if !created {
			t.Fatal("could not recreate load-deltas by hand")
		}
		var drift migrations.Result
		for deadline := time.Now().Add(30 * time.Second); ; {
			if drift, err = migrations.Apply(ctx, cl, specs, false); err != nil {
				t.Fatal(err)
			}
			out.Reset()
			drift.Print(&out)
			// Until metadata shows the new topic, the old one may answer.
			if strings.Contains(out.String(), "actual 4") || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if drift.Changed() != 0 || !strings.Contains(out.String(), "drift         "+deltas.Name) || !strings.Contains(out.String(), "drift partitions: declared 16, actual 4") {
			t.Fatalf("a load-deltas topic of another layout is not reported as drift:\n%s", out.String())
		}
	})
}

// waitStable re-runs Apply until the just-created topics show in metadata.
func waitStable(t *testing.T, ctx context.Context, cl *kgo.Client, specs []migrations.TopicSpec) migrations.Result {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := migrations.Apply(ctx, cl, specs, true)
		if err != nil {
			t.Fatal(err)
		}
		if res.Changed() == 0 && res.Drifted() == 0 || time.Now().After(deadline) {
			return res
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestStoreRule(t *testing.T) {
	cur := migrations.StoreSchemaVersion
	cases := []struct {
		name   string
		found  uint32
		exists bool
		want   migrations.StoreAction
	}{
		{"no store", 0, false, migrations.StoreInit},
		{"current", cur, true, migrations.StoreOpen},
		{"newer store from a rolled-forward binary", cur + 1, true, migrations.StoreRebuild},
		{"older without upgrade path", cur - 2, true, migrations.StoreRebuild},
		{"v6 before worker health upgrades in place", 6, true, migrations.StoreUpgrade},
	}
	for _, c := range cases {
		got, why := migrations.StoreRule(c.found, c.exists)
		if got != c.want || why == "" {
			t.Errorf("%s: %v (%q), want %v", c.name, got, why, c.want)
		}
	}
}

// TestApplyReadsTheBrokerNotTheClientCache: migrate creates topics and
// reports drift from what the broker holds when it runs, and returns once
// the topics it created are usable by the very client it was given, whatever
// that client's metadata cache keeps: a client that caches metadata for an
// hour (kgo.MetadataMinAge) still finds every created partition at once, and
// a partition added meanwhile is drift on the next run.
func TestApplyReadsTheBrokerNotTheClientCache(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix, _, _, ctx, specs := migrateSetup(t, brokers)
		cl := kafkatest.Client(t, brokers, kgo.MetadataMinAge(time.Hour), kgo.MetadataMaxAge(time.Hour))
		adm := kadm.NewClient(cl)
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := migrations.Apply(actx, cl, specs, false); err != nil {
			t.Fatalf("apply with a client that caches metadata for an hour: %v", err)
		}
		names := make([]string, len(specs))
		for i, s := range specs {
			names[i] = s.Name
		}
		ends, err := adm.ListEndOffsets(actx, names...)
		if err == nil {
			err = ends.Error()
		}
		if err != nil || len(ends) != len(specs) {
			t.Fatalf("after apply, the client lists the end offsets of %d of %d topics: %v", len(ends), len(specs), err)
		}
		load := prefix + string(events.TopicLoad)
		if _, err := adm.CreatePartitions(actx, 1, load); err != nil {
			t.Fatal(err)
		}
		// The broker serves the new partition a moment after the controller
		// took it; within that moment the next run may not see it yet.
		var out bytes.Buffer
		for {
			res, err := migrations.Apply(actx, cl, specs, true)
			if err != nil {
				t.Fatalf("a partition added after the first run is not drift on the next:\n%s%v", out.String(), err)
			}
			out.Reset()
			res.Print(&out)
			if strings.Contains(out.String(), "drift         "+load) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}
