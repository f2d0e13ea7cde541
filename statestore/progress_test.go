package statestore

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestProgressSpeaksOnlyWhileCatchingUp: a replica that is behind the log
// by more than it applies in an interval logs its progress at info, so an
// operator can tell a slow replay from a stuck one;
// once it has caught up, the records that keep arriving (load samples of an idle
// fleet) are a debug line, so a quiet fleet makes a quiet log.
func TestProgressSpeaksOnlyWhileCatchingUp(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p := newProgress(log, time.Millisecond)
	p.add(100)
	p.report(500)
	if !strings.Contains(buf.String(), "statestore: progress") || !strings.Contains(buf.String(), "lag=500") {
		t.Fatalf("catching up: %q", buf.String())
	}
	buf.Reset()
	// Less left than one interval applied: done before the next line.
	p.add(100)
	p.report(50)
	if buf.Len() != 0 {
		t.Fatalf("nearly caught up: logged at info %q", buf.String())
	}
	p.add(10)
	p.report(0)
	if buf.Len() != 0 {
		t.Fatalf("caught up, records still arriving: logged at info %q", buf.String())
	}
	p.report(0)
	if buf.Len() != 0 {
		t.Fatalf("idle: logged %q", buf.String())
	}
	// An idle fleet's trickle of load samples: a few records arrive
	// between the last fetch and the lag probe, so the lag is rarely 0,
	// but the store applied more in the interval than remains.
	p.add(16)
	p.report(4)
	if buf.Len() != 0 {
		t.Fatalf("keeping up with a trickle: logged at info %q", buf.String())
	}
	// Nothing applied while lag remains: stuck, which an operator must see.
	p.report(4)
	if !strings.Contains(buf.String(), "statestore: progress") || !strings.Contains(buf.String(), "lag=4") {
		t.Fatalf("stuck: %q", buf.String())
	}
	var dbg bytes.Buffer
	p = newProgress(slog.New(slog.NewTextHandler(&dbg, &slog.HandlerOptions{Level: slog.LevelDebug})), time.Millisecond)
	p.add(10)
	p.report(0)
	if !strings.Contains(dbg.String(), "level=DEBUG") || !strings.Contains(dbg.String(), "records=10") {
		t.Fatalf("caught up at debug: %q", dbg.String())
	}
}
