package addrfile

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "addr.json")
	if _, err := Read(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("before Write: %v, want fs.ErrNotExist", err)
	}
	want := Addrs{HTTP: "127.0.0.1:4242", Debug: "127.0.0.1:4343"}
	if err := Write(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil || got != want {
		t.Fatalf("Read = %+v, %v; want %+v", got, err, want)
	}
	// No temporary file is left beside it.
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("%d files in the directory, want 1", len(ents))
	}
	if err := Write(path, Addrs{}); err == nil {
		t.Fatal("Write without an HTTP address succeeded")
	}
}

func TestReadRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"not json":    "127.0.0.1:1",
		"no http":     `{"debug_addr":"127.0.0.1:1"}`,
		"too long":    `{"http_addr":"` + strings.Repeat("a", MaxBytes) + `"}`,
		"empty":       "",
		"wrong types": `{"http_addr":7}`,
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if a, err := Read(path); err == nil {
			t.Errorf("%s: Read = %+v, want an error", name, a)
		}
	}
}

func TestWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "addr.json")
	go func() {
		time.Sleep(30 * time.Millisecond)
		_ = Write(path, Addrs{HTTP: "127.0.0.1:1"})
	}()
	a, err := Wait(context.Background(), path, 5*time.Millisecond, func() error { return nil })
	if err != nil || a.HTTP != "127.0.0.1:1" {
		t.Fatalf("Wait = %+v, %v", a, err)
	}

	exited := errors.New("exited")
	if _, err := Wait(context.Background(), filepath.Join(t.TempDir(), "never"), time.Millisecond, func() error { return exited }); !errors.Is(err, exited) {
		t.Fatalf("Wait on a process that exited: %v, want its error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := Wait(ctx, filepath.Join(t.TempDir(), "never"), time.Millisecond, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its context: %v, want DeadlineExceeded", err)
	}
}
