// Command exportfixture writes a small export, through the real export
// path, for checks by tools outside Go: it starts an in-process kfake
// broker, writes generated decisions and their outcomes to it, and runs
// `export decisions --join-outcomes` and `export outcomes` in both formats
// into -dir. tests/python/test_export_parquet.py runs it and reads the files
// with pyarrow.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/replay"
	"github.com/pdrouter/pdrouter/replay/internal/replaytest"
)

func main() {
	dir := flag.String("dir", "", "directory to write decisions.{parquet,jsonl} and outcomes.{parquet,jsonl} into")
	n := flag.Int("n", 120, "decisions to generate")
	flag.Parse()
	if err := run(*dir, *n); err != nil {
		fmt.Fprintln(os.Stderr, "exportfixture:", err)
		os.Exit(1)
	}
}

func run(dir string, n int) error {
	if dir == "" {
		return fmt.Errorf("-dir is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return err
	}
	defer cluster.Close()
	conn := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}
	names := events.Names{Prefix: "fixture."}
	cl, err := kgo.NewClient(conn...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 3, 1, nil, names.Physical(events.TopicDecisions), names.Physical(events.TopicOutcomes)); err != nil {
		return err
	}
	cfg := decider.DefaultConfig()
	cfg.ConditionalDisagg = true
	cases, err := replaytest.Generate(n, 7, cfg)
	if err != nil {
		return err
	}
	var krs []*kgo.Record
	add := func(key string, m proto.Message, at int64) error {
		r, err := events.NewRecord(names, events.WorkerKey(key), m)
		if err != nil {
			return err
		}
		r.Timestamp = time.Unix(0, at)
		krs = append(krs, r)
		return nil
	}
	for _, c := range cases {
		if err := add(c.Rec.GetDecodeWorker().GetWorkerId(), c.Rec, c.Rec.GetDecidedAtUnixNano()); err != nil {
			return err
		}
	}
	for _, o := range replaytest.Outcomes(decisionsOf(cases)) {
		if err := add(o.GetDecodeWorker().GetWorkerId(), o, o.GetEventTimeUnixNano()); err != nil {
			return err
		}
	}
	if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	src := &replay.KafkaLog{Client: conn, Names: names}
	for _, f := range []replay.Format{replay.FormatParquet, replay.FormatJSONL} {
		if err := write(filepath.Join(dir, "decisions."+string(f)), func(w *os.File) error {
			_, err := replay.ExportDecisions(ctx, src, w, replay.ExportOptions{Format: f, JoinOutcomes: true})
			return err
		}); err != nil {
			return err
		}
		if err := write(filepath.Join(dir, "outcomes."+string(f)), func(w *os.File) error {
			_, err := replay.ExportOutcomes(ctx, src, w, replay.ExportOptions{Format: f})
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

func decisionsOf(cs []replaytest.Case) []*pb.DecisionRecord {
	out := make([]*pb.DecisionRecord, len(cs))
	for i := range cs {
		out[i] = cs[i].Rec
	}
	return out
}

// write creates path and runs fn on it, closing it after.
func write(path string, fn func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
