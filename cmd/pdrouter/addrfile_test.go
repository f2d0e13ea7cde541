package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestServeAddrFile: serve on port 0 writes the ports the kernel chose for
// the API and for /debug/pprof to --addr-file, and answers on both; a file
// it cannot write stops it with an error naming the flag.
func TestServeAddrFile(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	r := startReplica(t, brokers, prefix, t.TempDir(), "--debug-addr", "127.0.0.1:0")
	if strings.HasSuffix(r.url, ":0") {
		t.Fatalf("the API's address %s is the one asked for, not the one bound", r.url)
	}
	a := listenAddrs(t, r.addrFile)
	if a.Debug == "" || strings.HasSuffix(a.Debug, ":0") {
		t.Fatalf("--addr-file's debug address %q", a.Debug)
	}
	resp, err := http.Get("http://" + a.Debug + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/debug/pprof/ at the written address: %d", resp.StatusCode)
	}

	cmd := exec.Command(os.Args[0], "serve", "--brokers", strings.Join(brokers, ","), "--topic-prefix", prefix,
		"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--addr-file", filepath.Join(t.TempDir(), "no-such-dir", "addr.json"))
	cmd.Env = append(os.Environ(), "PDR_TEST_RUN_MAIN=1")
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
		if err == nil || !strings.Contains(string(out), "--addr-file") {
			t.Fatalf("serve with an unwritable --addr-file: %v\n%s", err, out)
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("serve with an unwritable --addr-file still runs after 60s:\n%s", out)
	}
}
