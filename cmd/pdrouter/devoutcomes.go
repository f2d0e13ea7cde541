package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/pdrouter/pdrouter/replay"
)

// outcomeCheck is what `pdrouter dev --sim` found of its run's outcomes:
// of the requests the workload sent, how many have a decision whose row in
// an export joins a terminal outcome (completed or cancelled).
type outcomeCheck struct {
	Requests, Joined int
}

// Missing is the requests without a joined outcome, a request the router
// named no decision for included.
func (c outcomeCheck) Missing() int { return c.Requests - c.Joined }

func (c outcomeCheck) String() string {
	return fmt.Sprintf("%d of %d requests have their outcome joined to their decision (%d missing)", c.Joined, c.Requests, c.Missing())
}

// checkOutcomes exports the decisions of the log from since on, with their
// outcomes joined (replay.ExportDecisions, as `pdrouter export decisions
// --join-outcomes` does), and counts the decisions of ids that joined a
// terminal outcome. The door appends a request's last outcome after the
// client has its answer, so the export is repeated, every poll, until none
// is missing or wait has passed.
func checkOutcomes(ctx context.Context, src *replay.KafkaLog, requests int, ids []string, wait, poll time.Duration) (outcomeCheck, error) {
	deadline := time.Now().Add(wait)
	for {
		c, err := joinedOnce(ctx, src, requests, ids)
		if err != nil || c.Missing() == 0 || time.Now().After(deadline) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(poll):
		}
	}
}

func joinedOnce(ctx context.Context, src *replay.KafkaLog, requests int, ids []string) (outcomeCheck, error) {
	c := outcomeCheck{Requests: requests}
	pr, pw := io.Pipe()
	outcomes := map[string]string{}
	read := make(chan error, 1)
	go func() {
		dec := json.NewDecoder(pr)
		var err error
		for {
			var row struct {
				DecisionID string  `json:"decision_id"`
				Outcome    *string `json:"outcome"`
			}
			if err = dec.Decode(&row); err != nil {
				break
			}
			if row.Outcome != nil {
				outcomes[row.DecisionID] = *row.Outcome
			}
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
		// Drain what is left, so that the export never blocks on a pipe
		// nobody reads.
		_, _ = io.Copy(io.Discard, pr)
		read <- err
	}()
	_, err := replay.ExportDecisions(ctx, src, pw, replay.ExportOptions{Format: replay.FormatJSONL, JoinOutcomes: true})
	pw.CloseWithError(err)
	if rerr := <-read; err == nil {
		err = rerr
	}
	if err != nil {
		return c, fmt.Errorf("export the run's decisions with their outcomes: %w", err)
	}
	for _, id := range ids {
		if o := outcomes[id]; o == "completed" || o == "cancelled" {
			c.Joined++
		}
	}
	return c, nil
}
