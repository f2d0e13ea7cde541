package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/migrations"
)

// exitDrift is migrate's exit status when a topic differs from its
// declaration, so a migration Job fails loudly instead of passing.
const exitDrift = 3

func newMigrateCmd(a *app) *cobra.Command {
	o := migrations.DefaultOptions()
	var (
		dryRun     bool
		allowDrift bool
		rf         int
		partitions []string
		timeout    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create the declared topics; report drift, never alter",
		Long: `migrate creates every topic declared in migrations/ that does not exist and
prints what it changed. A topic that exists but differs from its declaration
(partitions, replication factor, cleanup.policy, retention.ms,
min.insync.replicas, compression.type) is reported as drift with the exact
difference, and left as it is. Exit status: 0 when every topic matches, 3 when
there is drift (unless --allow-drift), 1 on error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.kafka.Embedded() {
				return errors.New("migrate needs --brokers (PDR_BROKERS); `pdrouter dev` migrates its embedded broker itself")
			}
			if rf < 1 || rf > 32767 {
				return fmt.Errorf("--replication-factor %d: must be in [1, 32767]", rf)
			}
			o.ReplicationFactor = int16(rf)
			o.Prefix = a.topicPrefix
			p, err := parsePartitions(partitions)
			if err != nil {
				return err
			}
			o.Partitions = p
			specs, err := migrations.Declarations(o)
			if err != nil {
				return err
			}
			opts, err := a.kafkaOpts("migrate")
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			res, err := runMigrate(ctx, opts, specs, dryRun)
			if err != nil {
				return err
			}
			res.Print(a.stdout)
			a.log.Info("migrate done", "created", res.Changed(), "drifted", res.Drifted(), "dry_run", dryRun)
			if res.Drifted() > 0 && !allowDrift {
				return exitCode(exitDrift)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&dryRun, "dry-run", false, "print what would change; change nothing")
	f.BoolVar(&allowDrift, "allow-drift", false, "exit 0 even when a topic differs from its declaration")
	f.IntVar(&rf, "replication-factor", int(o.ReplicationFactor), "replication factor of new topics")
	f.IntVar(&o.MinInsyncReplicas, "min-insync-replicas", o.MinInsyncReplicas, "min.insync.replicas of every topic, in [1, replication factor]")
	f.StringSliceVar(&partitions, "partitions", nil, "partition count overrides, topic=n (e.g. kv-events=32)")
	f.DurationVar(&timeout, "timeout", 60*time.Second, "give up after this long")
	return cmd
}

func runMigrate(ctx context.Context, opts []kgo.Opt, specs []migrations.TopicSpec, dryRun bool) (migrations.Result, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return migrations.Result{}, err
	}
	defer cl.Close()
	return migrations.Apply(ctx, cl, specs, dryRun)
}

func parsePartitions(kvs []string) (map[events.Topic]int32, error) {
	out := map[events.Topic]int32{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--partitions %q: want topic=n", kv)
		}
		t, err := events.ParseTopic(k)
		if err != nil {
			return nil, fmt.Errorf("--partitions %q: %w", kv, err)
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--partitions %q: %q is not a number", kv, v)
		}
		out[t] = int32(n)
	}
	return out, nil
}
