package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestOverContextRequestRefusedLikeAnEngine: a trace line whose prompt and output
// exceed the model's context is a request, not a corrupt file. The published Mooncake
// synthetic trace holds ten such lines (up to 191,386 tokens); an engine answers them
// 400, so the simulated fleet fails each one, counts it, and serves the rest, under
// every policy alike.
func TestOverContextRequestRefusedLikeAnEngine(t *testing.T) {
	var b strings.Builder
	for i := range 6 {
		in := 1200
		if i == 3 {
			in = MaxMooncakeContext + 10_000
		}
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 20, "hash_ids": [%d, %d]}`+"\n", 500*i, in, i, i+1)
	}
	w, err := ReadMooncake(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("a trace with one request over the model's context: %v", err)
	}
	if len(w.Requests) != 6 {
		t.Fatalf("%d requests, want 6", len(w.Requests))
	}
	for _, name := range []string{"always-remote", CondPrefix + "isl_bounding"} {
		p, err := PolicyByName(name)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := RunOffline(context.Background(), DefaultFleet(), w, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Completed != 5 || rep.Failed != 1 || rep.OverContext != 1 {
			t.Fatalf("%s: completed %d, failed %d, over the context %d; want 5, 1, 1", name, rep.Completed, rep.Failed, rep.OverContext)
		}
		if !strings.Contains(rep.String(), "1 over the model's context") {
			t.Fatalf("%s: the report does not say why a request failed:\n%s", name, rep)
		}
	}
}
