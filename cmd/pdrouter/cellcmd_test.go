package main

import (
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/events"
)

// `cell` says what the partitioner decides: each id's cell, the count per
// cell and pool, and --names-for ids that do fall in the cell asked for.
func TestCellCommand(t *testing.T) {
	out, _, err := run(t, nil, "cell", "--cells", "4", "decode/decode-0", "decode/decode-1", "prefill/prefill-0", "solo")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"decode-0", "decode-1", "prefill-0", "solo"} {
		want := events.CellOfWorker(id, 4).String()
		found := false
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			found = found || (len(f) == 2 && strings.HasSuffix(f[0], id) && f[1] == want)
		}
		if !found {
			t.Errorf("%s: want cell %s in\n%s", id, want, out)
		}
	}
	if !strings.Contains(out, "cell  workers  decode  prefill") {
		t.Errorf("no per-pool summary in\n%s", out)
	}

	out, _, err = run(t, nil, "cell", "--names-for", "3/4", "--count", "20", "decode-")
	if err != nil {
		t.Fatal(err)
	}
	ids := strings.Fields(out)
	if len(ids) != 20 {
		t.Fatalf("--count 20 printed %d ids", len(ids))
	}
	for _, id := range ids {
		if c := events.CellOfWorker(id, 4); c.Index != 3 || !strings.HasPrefix(id, "decode-") {
			t.Errorf("--names-for 3/4 printed %s, of cell %s", id, c)
		}
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cell", "--cells", "0", "w"}, "--cells 0: want 1 to 10000"},
		{[]string{"cell", "bad\x00id"}, `"bad\x00id"`},
		{[]string{"cell", "--names-for", "4/4", "p"}, "--names-for: cell \"4/4\""},
		{[]string{"cell", "--names-for", "1/4", "--count", "0", "p"}, "--count 1 to 1000000"},
		// Pools are the two a worker can be in: arbitrary ones would make
		// the summary a column per line of input.
		{[]string{"cell", "pool7/w"}, `pool "pool7": want decode or prefill`},
		// The scan for ids is bounded: ~count·n ids are hashed.
		{[]string{"cell", "--names-for", "1/10000", "--count", "1000000", "p"}, "hashes ~10000000000 ids"},
		// Every id printed is one a registration takes.
		{[]string{"cell", "--names-for", "0/2", "--count", "20", strings.Repeat("x", events.MaxWorkerIDLen-1)}, "is 254 bytes"},
	} {
		if _, _, err := run(t, nil, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to say %s", c.args, err, c.want)
		}
	}
}
