package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
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

// reportOutcomes runs checkOutcomes and prints its line ("outcomes     N of N
// requests have their outcome joined to their decision (0 missing)"), the
// line `pdrouter dev --sim` and `pdrouter export decisions
// --check-outcomes` share; a missing outcome is an error.
func reportOutcomes(ctx context.Context, w io.Writer, src *replay.KafkaLog, requests int, ids []string, wait time.Duration) error {
	c, err := checkOutcomes(ctx, src, requests, ids, wait, 250*time.Millisecond)
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(w, "outcomes     not checked: %v\n", err)
		}
		return err
	}
	fmt.Fprintf(w, "outcomes     %s\n", c)
	if c.Missing() > 0 {
		return fmt.Errorf("%d of %d requests have no outcome joined to a decision on the log", c.Missing(), c.Requests)
	}
	return nil
}

// Bounds of a --check-outcomes file: it names decisions one a line, and is
// read whole before the log is.
const (
	maxCheckIDs      = 1 << 20
	maxDecisionIDLen = 256
)

// readDecisionIDs reads a --check-outcomes file: decision ids, one a line,
// blank lines skipped. An empty file, a line longer than maxDecisionIDLen or
// more than maxCheckIDs ids is an error naming the line.
func readDecisionIDs(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--check-outcomes: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), maxDecisionIDLen+1)
	var ids []string
	line := 0
	for sc.Scan() {
		line++
		id := strings.TrimSpace(sc.Text())
		if id == "" {
			continue
		}
		if len(id) > maxDecisionIDLen {
			return nil, fmt.Errorf("--check-outcomes %s:%d: a decision id is at most %d bytes", path, line, maxDecisionIDLen)
		}
		if len(ids) == maxCheckIDs {
			return nil, fmt.Errorf("--check-outcomes %s:%d: at most %d decision ids", path, line, maxCheckIDs)
		}
		ids = append(ids, id)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("--check-outcomes %s:%d: a decision id is at most %d bytes", path, line+1, maxDecisionIDLen)
		}
		return nil, fmt.Errorf("--check-outcomes %s: %w", path, err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("--check-outcomes %s: no decision ids", path)
	}
	return ids, nil
}
