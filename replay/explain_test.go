package replay_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/replay"
)

// routeVariety sends prompts that exercise every branch the records must
// reproduce: a cached prefix (local), a long uncached prompt (remote), a
// prefix partly on host memory, a short uncached prompt, a prompt shorter
// than a block, and the same prompt twice (shared active blocks).
func routeVariety(r *replica, tag string) []routeAnswer {
	var out []routeAnswer
	add := func(id string, toks []uint32) { out = append(out, r.route(tag+id, toks)) }
	add("cached", promptOf(0, 64*16, 100, 1))
	add("long", promptOf(9, 0, 6000, 2))
	add("host", promptOf(1, 32*16, 40, 3))
	add("short", promptOf(9, 0, 300, 4))
	add("tiny", promptOf(9, 0, 7, 5))
	add("again-1", promptOf(2, 16*16, 900, 6))
	add("again-2", promptOf(2, 16*16, 900, 6))
	return out
}

// TestRecordedDecisionsReproduceByteForByte: decisions made by the real
// API and decider on a real store, under several configs, recompute from
// their records alone to the same decision, and re-encode to the records'
// exact bytes (invariant 6, the pure check).
func TestRecordedDecisionsReproduceByteForByte(t *testing.T) {
	configs := map[string]func(*decider.Config){
		"isl_bounding": nil,
		"decode_guard": func(c *decider.Config) {
			c.Disagg.DecodeBusyThreshold = decider.Some(0.05)
			c.Disagg.DecodeBusySource = decider.BusySourceMax
		},
		"isl_or_load": func(c *decider.Config) {
			c.Disagg.Policy = decider.PolicyISLOrLoad
			c.QueueThreshold = decider.Some(0.4)
			c.Disagg.EffISLThreshold = 700
		},
		"prefill_load": func(c *decider.Config) {
			c.Disagg.Policy = decider.PolicyPrefillLoad
			c.Disagg.PrefillBusyThreshold = decider.Some(0.3)
		},
		"softmax":  func(c *decider.Config) { c.Temperature = 0.7; c.OverlapScoreCredit = 0.8; c.PrefillLoadScale = 1.5 },
		"disabled": func(c *decider.Config) { c.ConditionalDisagg = false },
	}
	brokers := kafkatest.Fake(t)
	for name, mut := range configs {
		t.Run(name, func(t *testing.T) {
			prefix := kafkatest.Prefix(t)
			r := fleetReplica(t, brokers, prefix, mut)
			answers := routeVariety(r, name+"-")
			recs := readDecisions(t, brokers, r.names, len(answers))
			modes := map[string]int{}
			for _, rec := range recs {
				modes[rec.GetMode()+"/"+rec.GetReason()]++
				if rec.GetDeciderVersion() != replay.DeciderVersion {
					t.Fatalf("the API records decider version %d; replay.DeciderVersion is %d", rec.GetDeciderVersion(), replay.DeciderVersion)
				}
				pc, _ := replay.CheckPure(rec)
				if pc.Error != "" || !pc.Identical || !pc.RecordBytesIdentical || !pc.ConfigHashMatches {
					t.Fatalf("%s: pure check %+v", rec.GetRequestId(), pc)
				}
			}
			t.Logf("%s: %d decisions reproduce byte for byte: %v", name, len(recs), modes)
		})
	}
}

// TestPureCheckReportsPlantedDifferences: a record changed after the
// decision is caught by the pure check, field by field, with a cause.
func TestPureCheckReportsPlantedDifferences(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	r := fleetReplica(t, brokers, prefix, nil)
	a := r.route("cached", promptOf(0, 64*16, 100, 1))
	rec := readDecisions(t, brokers, r.names, 1)[0]
	if a.Mode != "local" || a.Decode != "decode-1" {
		t.Fatalf("fixture: %+v", a)
	}

	find := func(pc replay.PureCheck, field string) replay.Difference {
		t.Helper()
		for _, d := range pc.Differences {
			if d.Field == field {
				return d
			}
		}
		t.Fatalf("no difference on %s in %+v", field, pc.Differences)
		return replay.Difference{}
	}

	// 1. A cost term rewritten: only that row's cost differs.
	planted := proto.Clone(rec).(*pb.DecisionRecord)
	planted.Candidates[1].Cost += 3
	pc, _ := replay.CheckPure(planted)
	d := find(pc, "candidates[decode-2].cost")
	if pc.Identical || len(pc.Differences) != 1 || !strings.Contains(d.Cause, "does not follow from the row's own recorded inputs") ||
		string(d.Worker) != "decode-2" {
		t.Fatalf("planted cost: %+v", pc)
	}

	// 2. An input rewritten so that another worker wins: the recompute
	// follows the planted input, so the recorded selection and the terms
	// derived from the input disagree with it.
	planted = proto.Clone(rec).(*pb.DecisionRecord)
	planted.Candidates[0].ActiveDecodeBlocks += 5000
	pc, _ = replay.CheckPure(planted)
	find(pc, "candidates[decode-1].potential_decode_blocks")
	find(pc, "candidates[decode-1].picked")
	if d := find(pc, "decode_worker"); d.Cause != "follows from the candidate differences" {
		t.Fatalf("decode_worker cause: %q", d.Cause)
	}

	// 3. The outcome rewritten, with a consistent table: the mode does not
	// follow from the table.
	planted = proto.Clone(rec).(*pb.DecisionRecord)
	planted.Mode = "remote"
	pc, _ = replay.CheckPure(planted)
	if d := find(pc, "mode"); !strings.Contains(d.Cause, "does not follow from the candidate table") || string(d.Record) != `"remote"` || string(d.Other) != `"local"` {
		t.Fatalf("planted mode: %+v", d)
	}

	// 4. The config rewritten: it no longer hashes to config_hash, and the
	// threshold check shows the planted limit.
	planted = proto.Clone(rec).(*pb.DecisionRecord)
	planted.ConfigJson = strings.Replace(planted.ConfigJson, `"eff_isl_threshold":2048`, `"eff_isl_threshold":64`, 1)
	pc, _ = replay.CheckPure(planted)
	if pc.ConfigHashMatches || !strings.Contains(find(pc, "config_hash").Cause, "does not hash") {
		t.Fatalf("planted config: %+v", pc)
	}
	find(pc, "eff_isl_check.limit")

	// 5. The untouched record is identical.
	if pc, _ := replay.CheckPure(rec); !pc.Identical || !pc.RecordBytesIdentical {
		t.Fatalf("original: %+v", pc)
	}
}

// TestStateCheck: the state rebuilt at a record's watermark from the log
// reproduces the record when nothing else happened; when the replica had
// another decision of its own in flight (counted at once, not yet read back
// from the log), the difference is reported on the worker it loaded, with
// that decision as its cause, and counting it reproduces the record.
func TestStateCheck(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		r := fleetReplica(t, brokers, prefix, nil)
		checker := &replay.KafkaStateChecker{Client: r.conn, Names: r.names, TempDir: t.TempDir()}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()

		// Nothing else happened: A is decided on a state that holds
		// everything the replica knows.
		a := r.route("alone", promptOf(0, 64*16, 100, 1))
		r.catchUp()
		// B and C back to back: C is decided while B is counted locally but
		// not yet read back from the log. They share decode-1's doc-0 prefix.
		b := r.route("first", promptOf(0, 64*16, 200, 2))
		c := r.route("second", promptOf(0, 64*16, 300, 3))
		r.catchUp()
		recs := byID(readDecisions(t, brokers, r.names, 3))

		sa := checker.CheckState(ctx, recs[a.DecisionID])
		if !sa.Performed || sa.Error != "" || !sa.Identical || len(sa.Differences) != 0 || sa.Rebuild.Replayed == 0 {
			t.Fatalf("A: %+v", sa)
		}
		sb := checker.CheckState(ctx, recs[b.DecisionID])
		if !sb.Identical {
			t.Fatalf("B (its predecessor was read back): %+v", sb)
		}
		sc := checker.CheckState(ctx, recs[c.DecisionID])
		if sc.Identical || !sc.IdenticalWithInFlight || !sc.Explained || len(sc.InFlight) != 1 || sc.InFlight[0].DecisionID != b.DecisionID {
			t.Fatalf("C: %+v", sc)
		}
		var onDecode1 bool
		for _, d := range sc.Differences {
			if d.Worker == "decode-1" && strings.HasSuffix(d.Field, ".active_decode_blocks") {
				onDecode1 = true
				if !strings.Contains(d.Cause, "in-flight decision") || !strings.Contains(d.Cause, b.DecisionID) {
					t.Fatalf("cause: %q", d.Cause)
				}
			}
		}
		if !onDecode1 {
			t.Fatalf("no active_decode_blocks difference on decode-1: %+v", sc.Differences)
		}
		t.Logf("C's state check: %d differences, causes %q", len(sc.Differences), sc.Causes)

		// The explanation ties it together, as text and JSON.
		exp := replay.Explain(ctx, recs[c.DecisionID], replay.ExplainOptions{State: checker})
		var text strings.Builder
		if err := exp.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"decode-1", "runner-up", "eff_isl_threshold", "identical, record byte for byte", "in-flight decision", b.DecisionID} {
			if !strings.Contains(text.String(), want) {
				t.Fatalf("text lacks %q:\n%s", want, text.String())
			}
		}
		if _, err := json.Marshal(exp); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStateCheckUnderLoad: decisions made concurrently by two replicas
// that share the log, with their materializers running in the background as
// in `pdrouter serve`, either reproduce from the state rebuilt at their
// watermark, or reproduce once their replica's in-flight decisions are
// counted. The other replica's decisions are in the state exactly when the
// watermark says so.
func TestStateCheckUnderLoad(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		prefix := kafkatest.Prefix(t)
		kafkatest.Migrate(t, brokers, prefix)
		r := newReplica(t, brokers, prefix, "router-a", nil)
		r2 := newReplica(t, brokers, prefix, "router-b", nil)
		r.setupFleet()
		r.catchUp()
		r2.catchUp()
		r.runMaterializer()
		r2.runMaterializer()
		const n, workers = 40, 6
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				on := r
				if w%3 == 2 {
					on = r2
				}
				for i := w; i < n; i += workers {
					on.route("load-"+string(rune('a'+i)), promptOf(i%3, (16+i)*16, 50+37*i, i))
				}
			}()
		}
		wg.Wait()
		recs := readDecisions(t, brokers, r.names, n)
		checker := &replay.KafkaStateChecker{Client: r.conn, Names: r.names, TempDir: t.TempDir()}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		identical, withInFlight := 0, 0
		for _, rec := range recs {
			if pc, _ := replay.CheckPure(rec); !pc.Identical || !pc.RecordBytesIdentical {
				t.Fatalf("pure check of %s: %+v", rec.GetRequestId(), pc)
			}
			sc := checker.CheckState(ctx, rec)
			switch {
			case sc.Identical:
				identical++
			case sc.IdenticalWithInFlight && sc.Explained:
				withInFlight++
			default:
				t.Fatalf("%s: state check neither reproduces nor explains: %+v", rec.GetRequestId(), sc)
			}
		}
		t.Logf("%d decisions under load: %d identical from the log, %d identical once in-flight decisions are counted", n, identical, withInFlight)
	})
}

// TestStateCheckStartsFromSnapshot: with a snapshot at or before the
// watermark under the snapshot directory, the rebuild starts there and
// replays only the rest, gives the same answer, and leaves the snapshot as
// it was; a snapshot past the watermark is skipped with its reason.
func TestStateCheckStartsFromSnapshot(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	r := fleetReplica(t, brokers, prefix, nil)
	snaps := filepath.Join(r.dataDir, "snapshots")
	if _, err := r.store.Checkpoint(filepath.Join(snaps, "early")); err != nil {
		t.Fatal(err)
	}
	before := treeDigest(t, filepath.Join(snaps, "early"))
	r.route("one", promptOf(0, 64*16, 100, 1))
	r.catchUp()
	a := r.route("two", promptOf(1, 32*16, 100, 2))
	r.catchUp()
	r.route("three", promptOf(2, 16*16, 100, 3))
	r.catchUp()
	if _, err := r.store.Checkpoint(filepath.Join(snaps, "late")); err != nil {
		t.Fatal(err)
	}
	rec := byID(readDecisions(t, brokers, r.names, 3))[a.DecisionID]
	checker := &replay.KafkaStateChecker{Client: r.conn, Names: r.names, SnapshotDir: snaps, TempDir: t.TempDir()}
	sc := checker.CheckState(context.Background(), rec)
	if !sc.Identical || sc.Rebuild.Snapshot != filepath.Join(snaps, "early") || sc.Rebuild.Replayed != 1 {
		t.Fatalf("state check from the snapshot: %+v %+v", sc, sc.Rebuild)
	}
	if len(sc.Rebuild.SnapshotsSkipped) != 1 || !strings.Contains(sc.Rebuild.SnapshotsSkipped[0], "after the watermark") {
		t.Fatalf("late snapshot not skipped: %q", sc.Rebuild.SnapshotsSkipped)
	}
	if after := treeDigest(t, filepath.Join(snaps, "early")); after != before {
		t.Fatal("the state check changed the snapshot it started from")
	}
}

// treeDigest names every file of a directory with its size and content.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		b.WriteString(p + ":" + string(data) + "\n")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestExplainEndpoint: GET /v1/decisions/{id}/explain answers the pure
// check, the table, the runner-up and the deciding rule, and says why the
// state check is the CLI's.
func TestExplainEndpoint(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	r := fleetReplica(t, brokers, prefix, nil)
	a := r.route("cached", promptOf(0, 64*16, 100, 1))
	var exp replay.Explanation
	r.do("GET", "/v1/decisions/"+a.DecisionID+"/explain", nil, &exp)
	if !exp.PureCheck.Identical || !exp.PureCheck.RecordBytesIdentical || exp.StateCheck.Performed ||
		!strings.Contains(exp.StateCheck.NotPerformed, "pdrouter explain") {
		t.Fatalf("explain: %+v", exp)
	}
	if exp.Decode.Picked != "decode-1" || exp.Decode.RunnerUp == "" || exp.Decode.Margin <= 0 ||
		!strings.HasPrefix(exp.ModeDecision.DecidedBy, "eff_isl") || exp.ModeDecision.Distance >= 0 || len(exp.Candidates) != 5 {
		t.Fatalf("explain: decode %+v mode %+v", exp.Decode, exp.ModeDecision)
	}
	t.Logf("decode: %s; mode: %s", exp.Decode.Summary, exp.ModeDecision.Summary)

	// The CLI finds the record in the log by its id (a ULID: only minutes
	// around its time are read), or reads it from GET /v1/decisions/{id}.
	if at, ok := replay.DecisionIDTime(a.DecisionID); !ok || time.Since(at) > time.Minute {
		t.Fatalf("decision id %s: time %v %v", a.DecisionID, at, ok)
	}
	found, err := replay.FindDecision(context.Background(), &replay.KafkaLog{Client: r.conn, Names: r.names}, a.DecisionID, 10*time.Minute)
	if err != nil || found.GetDecisionId() != a.DecisionID {
		t.Fatalf("find: %v %v", found, err)
	}
	var body json.RawMessage
	r.do("GET", "/v1/decisions/"+a.DecisionID, nil, &body)
	file := filepath.Join(t.TempDir(), "rec.json")
	if err := os.WriteFile(file, body, 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile, err := replay.ReadRecordFile(file)
	if err != nil || !proto.Equal(fromFile, found) {
		t.Fatalf("record file: %v\n%v\n%v", err, fromFile, found)
	}
	if _, err := replay.FindDecision(context.Background(), &replay.KafkaLog{Client: r.conn, Names: r.names}, "01M8KG3GCRAD65HSC7CVSNXE77", time.Minute); err == nil {
		t.Fatal("found a decision that does not exist")
	}
}
