package migrations

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Action is what migrate did, or would do, to one topic.
type Action string

const (
	ActionCreate    Action = "create"
	ActionUnchanged Action = "unchanged"
	ActionDrift     Action = "drift"
)

// Drift is one difference between a declaration and the cluster.
type Drift struct {
	Field    string // "partitions", "replication_factor" or a config key
	Declared string
	Actual   string
}

func (d Drift) String() string {
	return fmt.Sprintf("%s: declared %s, actual %s", d.Field, d.Declared, d.Actual)
}

// TopicResult is the outcome for one declared topic.
type TopicResult struct {
	Spec   TopicSpec
	Action Action
	Drift  []Drift
	// Done reports whether a create was carried out (false in a dry run).
	Done bool
}

// Result is the outcome of a migration, topics in declaration order.
type Result struct {
	Topics []TopicResult
}

// Changed counts topics that were (or would be) created.
func (r Result) Changed() int { return r.count(ActionCreate) }

// Drifted counts topics that differ from their declaration.
func (r Result) Drifted() int { return r.count(ActionDrift) }

func (r Result) count(a Action) int {
	n := 0
	for _, t := range r.Topics {
		if t.Action == a {
			n++
		}
	}
	return n
}

// Print writes a human report: one line per topic, one per drift.
func (r Result) Print(w io.Writer) {
	for _, t := range r.Topics {
		verb := string(t.Action)
		if t.Action == ActionCreate && !t.Done {
			verb = "would create"
		}
		fmt.Fprintf(w, "%-13s %s (partitions=%d rf=%d", verb, t.Spec.Name, t.Spec.Partitions, t.Spec.ReplicationFactor)
		for _, k := range SortedKeys(t.Spec.Configs) {
			fmt.Fprintf(w, " %s=%s", k, t.Spec.Configs[k])
		}
		fmt.Fprintln(w, ")")
		for _, d := range t.Drift {
			fmt.Fprintf(w, "    drift %s\n", d)
		}
	}
	fmt.Fprintf(w, "%d created, %d unchanged, %d drifted\n", r.Changed(), r.count(ActionUnchanged), r.Drifted())
}

// Apply creates every declared topic that is missing and compares the rest
// with their declarations. With dryRun it changes nothing. It is idempotent:
// a second run reports every topic unchanged (or drifted), never created.
//
// It reads the cluster as the broker holds it when Apply runs, not as cl
// cached it: kadm answers topic listings and offset lookups from the
// client's metadata, kept up to kgo.MetadataMinAge (5 s by default), so a
// run shortly after another would compare stale partitions, and the wait
// for created topics would see them unknown until that age had passed.
// Apply therefore purges the declared topics from cl's metadata before it
// reads them, and the created ones before each look; cl is best a client of
// its own (a producer or consumer of these topics refreshes them again).
func Apply(ctx context.Context, cl *kgo.Client, specs []TopicSpec, dryRun bool) (Result, error) {
	adm := kadm.NewClient(cl)
	res := Result{Topics: make([]TopicResult, len(specs))}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
		res.Topics[i].Spec = s
	}
	cl.PurgeTopicsFromClient(names...)
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return res, fmt.Errorf("migrate: list topics: %w", err)
	}
	for i, s := range specs {
		tr := &res.Topics[i]
		d, ok := details[s.Name]
		if ok && d.Err == nil {
			tr.Action = ActionUnchanged
			continue
		}
		if ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			return res, fmt.Errorf("migrate: describe %s: %w", s.Name, d.Err)
		}
		tr.Action = ActionCreate
		if dryRun {
			continue
		}
		cfg := make(map[string]*string, len(s.Configs))
		for k, v := range s.Configs {
			cfg[k] = kadm.StringPtr(v)
		}
		resp, err := adm.CreateTopic(ctx, s.Partitions, s.ReplicationFactor, cfg, s.Name)
		switch {
		case err == nil:
			tr.Done = true
		case errors.Is(err, kerr.TopicAlreadyExists):
			// Another migrate won the race; compare it like any existing topic.
			tr.Action = ActionUnchanged
		default:
			msg := resp.ErrMessage
			if msg != "" {
				msg = " (" + msg + ")"
			}
			return res, fmt.Errorf("migrate: create %s with %d partitions, replication factor %d: %w%s",
				s.Name, s.Partitions, s.ReplicationFactor, err, msg)
		}
	}
	if err := compare(ctx, adm, &res); err != nil {
		return res, err
	}
	return res, waitUsable(ctx, cl, res)
}

// waitUsable returns once every topic Apply created is usable (WaitUsable).
func waitUsable(ctx context.Context, cl *kgo.Client, res Result) error {
	var created []string
	for _, t := range res.Topics {
		if t.Done {
			created = append(created, t.Spec.Name)
		}
	}
	return WaitUsable(ctx, cl, created...)
}

// WaitUsable returns once every partition of the topics has a leader that
// answers, or ctx ends. A broker creates topics through its controller, so
// a topic can be unknown for a moment after CreateTopics returned; a
// consumer that starts in that moment would not see it. Each look purges
// the topics from cl's metadata first, or it would be answered from the
// cache that the previous look filled with "unknown" (Apply says why).
func WaitUsable(ctx context.Context, cl *kgo.Client, topics ...string) error {
	adm := kadm.NewClient(cl)
	for len(topics) > 0 {
		cl.PurgeTopicsFromClient(topics...)
		ends, err := adm.ListEndOffsets(ctx, topics...)
		if err == nil {
			err = ends.Error()
		}
		if err == nil && len(ends) == len(topics) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("migrate: created topics are not usable yet: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// compare fills in drift for the topics that already existed.
func compare(ctx context.Context, adm *kadm.Client, res *Result) error {
	var existing []string
	for _, t := range res.Topics {
		if t.Action == ActionUnchanged {
			existing = append(existing, t.Spec.Name)
		}
	}
	if len(existing) == 0 {
		return nil
	}
	details, err := adm.ListTopics(ctx, existing...)
	if err != nil {
		return fmt.Errorf("migrate: list topics: %w", err)
	}
	configs, err := adm.DescribeTopicConfigs(ctx, existing...)
	if err != nil {
		return fmt.Errorf("migrate: describe topic configs: %w", err)
	}
	for i := range res.Topics {
		tr := &res.Topics[i]
		if tr.Action != ActionUnchanged {
			continue
		}
		d := details[tr.Spec.Name]
		if got := int32(len(d.Partitions)); got != tr.Spec.Partitions {
			tr.Drift = append(tr.Drift, Drift{"partitions", itoa(tr.Spec.Partitions), itoa(got)})
		}
		if got := replicationFactor(d); got != int(tr.Spec.ReplicationFactor) {
			tr.Drift = append(tr.Drift, Drift{"replication_factor", itoa(tr.Spec.ReplicationFactor), strconv.Itoa(got)})
		}
		rc, err := configs.On(tr.Spec.Name, nil)
		if err != nil {
			return fmt.Errorf("migrate: configs of %s: %w", tr.Spec.Name, err)
		}
		actual := map[string]string{}
		for _, c := range rc.Configs {
			if c.Value != nil {
				actual[c.Key] = *c.Value
			}
		}
		for _, k := range SortedKeys(tr.Spec.Configs) {
			want := tr.Spec.Configs[k]
			got, ok := actual[k]
			if !ok {
				got = "(unset)"
			}
			if got != want {
				tr.Drift = append(tr.Drift, Drift{k, want, got})
			}
		}
		if len(tr.Drift) > 0 {
			tr.Action = ActionDrift
		}
	}
	return nil
}

func replicationFactor(d kadm.TopicDetail) int {
	rf := 0
	for _, p := range d.Partitions {
		if len(p.Replicas) > rf {
			rf = len(p.Replicas)
		}
	}
	return rf
}

func itoa[T int16 | int32](v T) string { return strconv.FormatInt(int64(v), 10) }
