package kafkatest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAwaitBrokerStart: no file to wait for is no wait; a file written later
// with "ok" ends the wait; a file with another text is the start's failure,
// named; a file never written fails once the wait is over.
func TestAwaitBrokerStart(t *testing.T) {
	if err := awaitBrokerStart("", time.Millisecond, time.Millisecond); err != nil {
		t.Fatalf("no file: %v", err)
	}
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok")
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = os.WriteFile(ok+".tmp", []byte("ok\n"), 0o644)
		_ = os.Rename(ok+".tmp", ok)
	}()
	if err := awaitBrokerStart(ok, 10*time.Second, 5*time.Millisecond); err != nil {
		t.Fatalf("written later: %v", err)
	}
	failed := filepath.Join(dir, "failed")
	if err := os.WriteFile(failed, []byte("mvn failed: no route to Maven Central\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := awaitBrokerStart(failed, time.Second, time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not start: mvn failed") {
		t.Fatalf("failed start: %v", err)
	}
	if err := awaitBrokerStart(filepath.Join(dir, "never"), 20*time.Millisecond, time.Millisecond); err == nil || !strings.Contains(err.Error(), "still starting after") {
		t.Fatalf("never written: %v", err)
	}
}
