package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/replay"
)

// newExplainCmd is `pdrouter explain <decision-id>`: replay one decision
// (design.md invariant 6) and say why it went where it did.
func newExplainCmd(a *app) *cobra.Command {
	var (
		asJSON      bool
		noState     bool
		recordFile  string
		snapshotDir string
		tmpDir      string
		around      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "explain <decision-id>",
		Short: "Replay one decision and explain it: candidate table, runner-up, deciding rule, checks",
		Long: `explain reads a decision record from the decisions topic (or --record) and:

  - shows the candidate table, the runner-up in each pool and its cost
    margin, and the threshold or guard that settled local versus remote
    prefill, with how far the value was from it;
  - recomputes the decision from the record alone (the pure check), which
    must give the record byte for byte;
  - rebuilds the state at the record's watermark from the log, starting from
    the newest snapshot at or before it under --snapshot-dir, decides again
    (the state check), and names the cause of every difference, for example
    a decision of the same replica still in flight (counted by that replica
    at once, not yet in the log at the watermark).

The state check reads the log and builds a temporary store; it never
touches the replica's own store or snapshots.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id := args[0]
			var rec *pb.DecisionRecord
			if recordFile != "" {
				r, err := replay.ReadRecordFile(recordFile)
				if err != nil {
					return err
				}
				if r.GetDecisionId() != id {
					return fmt.Errorf("--record %s holds decision %s, not %s", recordFile, r.GetDecisionId(), id)
				}
				rec = r
			}
			opts := replay.ExplainOptions{}
			if a.kafka.Embedded() {
				if rec == nil {
					return fmt.Errorf("explain reads the decisions topic: give --brokers (PDR_BROKERS), or --record FILE with the record (GET /v1/decisions/%s)", id)
				}
				opts.NoStateReason = "no --brokers: the state check rebuilds the state from the Kafka log"
			} else {
				conn, err := a.kafkaOpts("explain")
				if err != nil {
					return err
				}
				if rec == nil {
					a.log.Info("explain: looking for the decision in the log", "decision_id", id, "around", around)
					rec, err = replay.FindDecision(ctx, &replay.KafkaLog{Client: conn, Names: a.names(), Logger: a.log}, id, around)
					if err != nil {
						return err
					}
				}
				if noState {
					opts.NoStateReason = "--no-state-check"
				} else {
					if snapshotDir == "" {
						snapshotDir = filepath.Join(a.dataDir, "snapshots")
					}
					opts.State = &replay.KafkaStateChecker{Client: conn, Names: a.names(), SnapshotDir: snapshotDir, TempDir: tmpDir, Logger: a.log}
				}
			}
			exp := replay.Explain(ctx, proto.Clone(rec).(*pb.DecisionRecord), opts)
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(exp)
			}
			if err := exp.WriteText(a.stdout); err != nil {
				return err
			}
			if exp.PureCheck.Error != "" {
				return errors.New("the pure check could not run: " + exp.PureCheck.Error)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the explanation as JSON (the stable form for tools; the body of GET /v1/decisions/{id}/explain plus the state check)")
	f.BoolVar(&noState, "no-state-check", false, "skip the state check (which rebuilds the state at the watermark from the log)")
	f.StringVar(&recordFile, "record", "", "read the record from this JSON file (GET /v1/decisions/{id}, or a `log tail decisions --json` line) instead of the log")
	f.StringVar(&snapshotDir, "snapshot-dir", "", "snapshots to start the state rebuild from (default <data-dir>/snapshots)")
	f.StringVar(&tmpDir, "tmp-dir", "", "where the temporary store of the state check goes (default the system's temporary directory)")
	f.DurationVar(&around, "search-window", 10*time.Minute, "read decisions this long before and after the time in the decision id (a ULID); 0 reads the whole topic")
	return cmd
}
