package main

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestFleetRegisteringDoesNotStopTheRouter: a replica with conditional
// disaggregation that starts on an empty registry keeps serving while the
// fleet registers, decode workers before prefill workers: the pools are
// judged as the registry stood at start-up, and a pool missing later is a
// warning, not an exit. A replica that starts on that registry, decode
// workers and no prefill worker, still refuses to run.
func TestFleetRegisteringDoesNotStopTheRouter(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	t.Setenv("PDR_TEST_POOL_CHECK_EVERY", "200ms")
	r := startReplica(t, brokers, prefix, t.TempDir())
	code, raw, err := post(r.url+"/v1/workers", map[string]any{"worker_id": "d1", "pool": "decode", "model": "m", "block_size": 16, "total_kv_blocks": 1000})
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("register d1: %d %s %v", code, raw, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(r.logs.String(), "no prefill worker is registered") {
		if r.cmd.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("no warning about the missing prefill pool within 10s (exited %v)", r.cmd.ProcessState)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // more checks
	resp, err := http.Get(r.url + "/readyz")
	if err != nil {
		t.Fatalf("the replica stopped while its fleet registered: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz %d while the fleet registers", resp.StatusCode)
	}

	listen, _ := listenArgs(t)
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--brokers", strings.Join(brokers, ","), "--topic-prefix", prefix,
		"--data-dir", t.TempDir(), "--router-conditional-disagg"}, listen...)...)
	cmd.Env = append(os.Environ(), "PDR_TEST_RUN_MAIN=1")
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(logs.String(), `start-up check: --router-conditional-disagg: requires separate prefill and decode pools: no prefill worker is registered for model "m"`) {
			t.Fatalf("a replica started on a registry without prefill workers exited with %v:\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("a replica started on a registry without prefill workers still runs after 30s:\n%s", logs.String())
	}
}
