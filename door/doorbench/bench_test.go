package doorbench

import (
	"context"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/door/doortest"
)

// TestRunSplitsTheDoorsTTFT: a small run against in-test engines measures
// both modes, sees every door request at its decision and at its engine
// write (the split rows are not empty), and does not open a connection per
// request in the measured rounds.
func TestRunSplitsTheDoorsTTFT(t *testing.T) {
	cfg := Config{Streams: 4, Requests: 32, Workers: 2, Rounds: 2, PromptTokens: 16, OutputTokens: 4,
		Start: func(id string) (Upstream, error) { return doortest.Start(id), nil }}
	var out strings.Builder
	res, rows, err := Run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Direct[0] <= 0 || res.Door[0] <= 0 || res.DoorWall <= 0 || res.DirectWall <= 0 || res.DirectAlloc == 0 || res.DoorAlloc == 0 {
		t.Fatalf("not measured: %+v", res)
	}
	// A client sends its next request as soon as its answer ends, which
	// can be before net/http's Transport has put the connection back in
	// its pool: it then dials another. A few such, but not one per request
	// (16 through the door here).
	if res.DialsToDoor >= int64(cfg.Streams) {
		t.Fatalf("the clients opened %d connections to the door after the warm-up", res.DialsToDoor)
	}
	for _, r := range rows {
		if strings.HasPrefix(r.Measure, "via door:") && strings.HasPrefix(r.Value, "0s /") {
			t.Fatalf("an empty split: %s\n%s", r.Measure, out.String())
		}
	}
}
