package replay_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/replay"
	"github.com/pdrouter/pdrouter/replay/internal/replaytest"
)

// produceLog writes decision records and their outcomes
// (replaytest.Outcomes) to the topics under names, with Kafka timestamps at
// their event times, as the API's producer writes them.
func produceLog(t *testing.T, brokers []string, names events.Names, recs []*pb.DecisionRecord) {
	t.Helper()
	cl := kafkatest.Client(t, brokers)
	var krs []*kgo.Record
	add := func(key string, m proto.Message, at int64) {
		r, err := events.NewRecord(names, events.WorkerKey(key), m)
		if err != nil {
			t.Fatal(err)
		}
		r.Timestamp = time.Unix(0, at)
		krs = append(krs, r)
	}
	for _, rec := range recs {
		add(rec.GetDecodeWorker().GetWorkerId(), rec, rec.GetDecidedAtUnixNano())
	}
	for _, o := range replaytest.Outcomes(recs) {
		add(o.GetDecodeWorker().GetWorkerId(), o, o.GetEventTimeUnixNano())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestExportRoundTrip: a window of the log exported as Parquet and as JSON
// lines, joined with outcomes, reads back (Parquet through parquet-go) to
// the same rows in both formats; each row turns back into its record
// (all but the hash chains); the window selects by event time; and what-if
// on the Parquet file equals what-if on the records.
func TestExportRoundTrip(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	names := events.Names{Prefix: prefix}
	recs := records(generate(t, 300, 5, islConfig()))
	produceLog(t, brokers, names, recs)
	conn := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	ctx := context.Background()
	dir := t.TempDir()

	// The window holds decisions 50..249 (decided_at is genBase + i ms).
	win := replay.Window{From: time.Unix(0, genBase+50e6), To: time.Unix(0, genBase+250e6)}
	src := &replay.KafkaLog{Client: conn, Names: names, Window: win}
	paths := map[replay.Format]string{}
	for _, f := range []replay.Format{replay.FormatParquet, replay.FormatJSONL} {
		p := filepath.Join(dir, "decisions."+string(f))
		out, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		st, err := replay.ExportDecisions(ctx, src, out, replay.ExportOptions{Format: f, JoinOutcomes: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		if st.Rows != 200 || st.Joined != 100 {
			t.Fatalf("%s: %+v", f, st)
		}
		paths[f] = p
	}
	pq, err := replay.ReadRows[replay.DecisionRow](paths[replay.FormatParquet])
	if err != nil {
		t.Fatal(err)
	}
	jl, err := replay.ReadRows[replay.DecisionRow](paths[replay.FormatJSONL])
	if err != nil {
		t.Fatal(err)
	}
	if len(pq) != 200 || len(jl) != 200 {
		t.Fatalf("rows: parquet %d, jsonl %d", len(pq), len(jl))
	}
	// Rows come in the order the partitions were fetched, which is not
	// stable between two reads.
	byDecision := func(a, b replay.DecisionRow) int { return strings.Compare(a.DecisionID, b.DecisionID) }
	slices.SortFunc(pq, byDecision)
	slices.SortFunc(jl, byDecision)
	want := map[string]*pb.DecisionRecord{}
	for i, r := range recs {
		if i >= 50 && i < 250 {
			want[r.GetDecisionId()] = r
		}
	}
	for i := range pq {
		if !reflect.DeepEqual(pq[i], jl[i]) {
			t.Fatalf("row %d differs between parquet and jsonl:\n%+v\n%+v", i, pq[i], jl[i])
		}
		r := &pq[i]
		orig := want[r.DecisionID]
		if orig == nil {
			t.Fatalf("row %s is outside the window", r.DecisionID)
		}
		delete(want, r.DecisionID)
		back, err := replay.RecordOfRow(r)
		if err != nil {
			t.Fatal(err)
		}
		noChains := proto.Clone(orig).(*pb.DecisionRecord)
		noChains.Chains = nil
		if !proto.Equal(back, noChains) {
			t.Fatalf("row %s does not turn back into its record:\n%v\n%v", r.DecisionID, back, noChains)
		}
		if r.SchemaVersion != replay.ExportSchemaVersion || len(r.Candidates) != 6 || int64(r.DecidedAt) != orig.GetDecidedAtUnixNano() {
			t.Fatalf("row %+v", r)
		}
		var idx int
		fmt.Sscanf(r.DecisionID, "dec-%d", &idx)
		joined := r.Outcome != nil
		if joined != (idx%2 == 0) {
			t.Fatalf("row %s: outcome joined %v", r.DecisionID, joined)
		}
		if joined {
			wantKind := "completed"
			if idx%7 == 0 {
				wantKind = "cancelled"
			}
			if *r.Outcome != wantKind || r.OutcomeEvents != 2 || *r.TTFTMs != 10+float64(idx%97) || *r.OutputTokens != int64(100+idx) ||
				int64(*r.FinishedAt) != orig.GetDecidedAtUnixNano()+9e8 || int64(*r.PrefillDoneAt) != orig.GetDecidedAtUnixNano()+5e6 {
				t.Fatalf("row %s outcome: %v %d %v %v", r.DecisionID, *r.Outcome, r.OutcomeEvents, *r.TTFTMs, *r.OutputTokens)
			}
		}
	}
	if len(want) != 0 {
		t.Fatalf("%d decisions of the window were not exported", len(want))
	}

	// What-if on the export file is what-if on the records.
	alt := []byte(`{"eff_isl_threshold":512}`)
	fromFile, err := replay.WhatIf(ctx, &replay.ExportFile{Path: paths[replay.FormatParquet]}, replay.WhatIfOptions{Disagg: alt})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := replay.WhatIf(ctx, sliceSource(recs[50:250]), replay.WhatIfOptions{Disagg: alt})
	if err != nil {
		t.Fatal(err)
	}
	fromLog, err := replay.WhatIf(ctx, src, replay.WhatIfOptions{Disagg: alt})
	if err != nil {
		t.Fatal(err)
	}
	if fromLog.Decisions != 200 || fromLog.Flips != direct.Flips || fromLog.LocalAfter != direct.LocalAfter {
		t.Fatalf("what-if from the log %+v, from the records %+v", fromLog, direct)
	}
	if fromFile.Flips != direct.Flips || fromFile.LocalAfter != direct.LocalAfter || fromFile.BaselineMismatches != 0 ||
		fromFile.LoadShift.MovedToPrefill != direct.LoadShift.MovedToPrefill || fromFile.Flips == 0 {
		t.Fatalf("what-if from the export %+v, from the records %+v", fromFile, direct)
	}

	// The outcomes table.
	op := filepath.Join(dir, "outcomes.parquet")
	of, _ := os.Create(op)
	st, err := replay.ExportOutcomes(ctx, &replay.KafkaLog{Client: conn, Names: names}, of, replay.ExportOptions{Format: replay.FormatParquet})
	of.Close()
	if err != nil || st.Rows != 300 {
		t.Fatalf("outcomes: %+v %v", st, err)
	}
	orows, err := replay.ReadRows[replay.OutcomeRow](op)
	if err != nil || len(orows) != 300 {
		t.Fatalf("outcome rows: %d %v", len(orows), err)
	}
	t.Logf("exported 200 decisions (100 joined) and 300 outcomes; what-if from the Parquet file: %d flips", fromFile.Flips)
}
