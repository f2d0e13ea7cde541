package replay_test

import (
	"context"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/replay"
	"github.com/pdrouter/pdrouter/replay/internal/replaytest"
)

const genBase = replaytest.Base

func generate(t testing.TB, n int, seed uint64, cfg decider.Config) []replaytest.Case {
	t.Helper()
	cs, err := replaytest.Generate(n, seed, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func records(cs []replaytest.Case) []*pb.DecisionRecord {
	out := make([]*pb.DecisionRecord, len(cs))
	for i := range cs {
		out[i] = cs[i].Rec
	}
	return out
}

// sliceSource is a DecisionSource over records in memory.
type sliceSource []*pb.DecisionRecord

func (s sliceSource) EachDecision(_ context.Context, fn func(*pb.DecisionRecord, replay.Position) error) error {
	for i, r := range s {
		if err := fn(r, replay.Position{Partition: -1, Offset: int64(i)}); err != nil {
			return err
		}
	}
	return nil
}

func islConfig() decider.Config {
	cfg := decider.DefaultConfig()
	cfg.ConditionalDisagg = true
	return cfg
}
