package discovery

import (
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/events"
)

func TestWorkerID(t *testing.T) {
	if got := WorkerID("k8s", "llm", "vllm-decode-0"); got != "k8s.llm.vllm-decode-0" {
		t.Fatalf("WorkerID = %q", got)
	}
	if !strings.HasPrefix(WorkerID("k8s", "llm", "p"), OwnedPrefix("k8s", "llm")) || !strings.HasPrefix(WorkerID("k8s", "llm", "p"), OwnedPrefix("k8s", "")) {
		t.Fatal("an id is not under its owned prefixes")
	}
	// The longest names: cut, with a hash that keeps two names apart.
	ns := strings.Repeat("n", 63)
	a := strings.Repeat("a", 250) + "-x1"
	b := strings.Repeat("a", 250) + "-x2"
	ia, ib := WorkerID(strings.Repeat("p", MaxIDPrefixLen), ns, a), WorkerID(strings.Repeat("p", MaxIDPrefixLen), ns, b)
	if len(ia) != events.MaxWorkerIDLen || ia == ib {
		t.Fatalf("long ids: %d bytes, equal=%v", len(ia), ia == ib)
	}
	if err := events.ValidateWorkerID(ia); err != nil {
		t.Fatal(err)
	}
	if ia != WorkerID(strings.Repeat("p", MaxIDPrefixLen), ns, a) {
		t.Fatal("WorkerID is not deterministic")
	}
	if !strings.HasPrefix(ia, OwnedPrefix(strings.Repeat("p", MaxIDPrefixLen), ns)) {
		t.Fatal("a cut id lost its namespace prefix")
	}
	for _, p := range []string{"", "K8S", "k8s.", "a/b", strings.Repeat("p", MaxIDPrefixLen+1)} {
		if CheckIDPrefix(p) == nil {
			t.Errorf("CheckIDPrefix(%q) accepted", p)
		}
	}
	if err := CheckIDPrefix("k8s-prod"); err != nil {
		t.Error(err)
	}
}
