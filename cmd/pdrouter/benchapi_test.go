package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// bench api at a tiny size: every routed request is answered, and clients
// report their requests completed, so the run is a steady state.
func TestBenchAPICompletesRequests(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		out, errOut, err := run(t, map[string]string{"PDR_DATA_DIR": t.TempDir()}, "bench", "api",
			"--brokers", strings.Join(brokers, ","), "--duration", "2s", "--clients", "2", "--in-flight", "2",
			"--min-tokens", "64", "--max-tokens", "512", "--decode-workers", "4", "--prefill-workers", "2", "--shared-prefixes", "2")
		if err != nil {
			t.Fatalf("bench api: %v\n%s\n%s", err, out, errOut)
		}
		num := func(label string) int {
			m := regexp.MustCompile(`(?m)^` + label + `\s+(\d+)`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no %q line in:\n%s", label, out)
			}
			n, _ := strconv.Atoi(m[1])
			return n
		}
		decisions, completions := num("decisions"), num("completions")
		if decisions == 0 || completions == 0 {
			t.Fatalf("%d decisions, %d completions:\n%s", decisions, completions, out)
		}
		// Each client completes all but its last --in-flight requests, and
		// the measured window cuts a few at its edges.
		if completions < decisions-2*2-4 || completions > decisions+4 {
			t.Errorf("%d completions for %d decisions:\n%s", completions, decisions, out)
		}
		if !regexp.MustCompile(`(?m)^errors\s+map\[\]$`).MatchString(out) || !strings.Contains(out, "errors map[])") {
			t.Errorf("errors in the run:\n%s", out)
		}
	})
}
