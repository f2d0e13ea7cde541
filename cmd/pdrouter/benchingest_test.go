package main

import (
	"strings"
	"testing"
)

// `bench ingest` at a tiny size on the in-process kfake: the publisher is
// this test binary re-executed as pdrouter (TestMain, PDR_TEST_RUN_MAIN)
// running the hidden `bench ingest-publisher`. At this size the rate is not
// the point: the bar may be missed, but nothing may be lost.
func TestBenchIngestCommand(t *testing.T) {
	t.Setenv("PDR_TEST_RUN_MAIN", "1") // for the publisher child only
	out, _, err := run(t, nil, "bench", "ingest", "--events", "2000", "--batched", "4", "--log-level", "warn")
	if err != nil && !strings.Contains(err.Error(), "missed its bar") {
		t.Fatalf("bench ingest: %v\n%s", err, out)
	}
	for _, want := range []string{"events/s, 1 event per ZMQ message", "≥ 200k", "ingest process CPU, 4 events per ZMQ message",
		"publisher process CPU", "in its own process", "in-process kfake (dev broker, not Kafka)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
}
