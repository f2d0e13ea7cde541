// Package addrfile tells a supervisor where a child process listens.
//
// Picking a free port in the parent, closing it and passing it to the child
// races every other process on the host that asks the kernel for a port: in
// the gap the kernel may hand the same port to someone else, the child then
// fails to bind, and the parent talks to a stranger that happens to answer.
// Instead the child binds port 0 and writes the addresses it got to a file
// the parent names; the parent reads them back (Wait).
//
// The file is written once, after every listener is bound, and renamed into
// place, so a reader sees either no file or the whole of it.
package addrfile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// MaxBytes bounds what Read takes from the file: it holds two addresses.
const MaxBytes = 4 << 10

// Addrs is what a listening process wrote.
type Addrs struct {
	// HTTP is the API's address, host:port.
	HTTP string `json:"http_addr"`
	// Debug is the address of /debug/pprof, empty when not served.
	Debug string `json:"debug_addr,omitempty"`
}

// Write writes a to path atomically: to a temporary file beside it, then
// renamed over it.
func Write(path string, a Addrs) error {
	if a.HTTP == "" {
		return errors.New("addrfile: no HTTP address")
	}
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("addrfile: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("addrfile: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("addrfile: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("addrfile: %w", err)
	}
	return nil
}

// Read reads the addresses at path. It returns an error wrapping
// fs.ErrNotExist while the process has not written them yet.
func Read(path string) (Addrs, error) {
	f, err := os.Open(path)
	if err != nil {
		return Addrs{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return Addrs{}, fmt.Errorf("addrfile: %s: %w", path, err)
	}
	if len(b) > MaxBytes {
		return Addrs{}, fmt.Errorf("addrfile: %s: longer than %d bytes", path, MaxBytes)
	}
	var a Addrs
	if err := json.Unmarshal(b, &a); err != nil {
		return Addrs{}, fmt.Errorf("addrfile: %s: %w", path, err)
	}
	if a.HTTP == "" {
		return Addrs{}, fmt.Errorf("addrfile: %s: no http_addr", path)
	}
	return a, nil
}

// Wait polls path every interval until the addresses are there, ctx ends
// or gone, when not nil, reports an error: the process exited before it
// listened.
func Wait(ctx context.Context, path string, interval time.Duration, gone func() error) (Addrs, error) {
	for {
		a, err := Read(path)
		if !errors.Is(err, fs.ErrNotExist) {
			return a, err
		}
		if gone != nil {
			if err := gone(); err != nil {
				return Addrs{}, err
			}
		}
		select {
		case <-ctx.Done():
			return Addrs{}, fmt.Errorf("addrfile: waiting for %s: %w", path, context.Cause(ctx))
		case <-time.After(interval):
		}
	}
}
