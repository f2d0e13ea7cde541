package statestore

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/migrations"
)

// A snapshot is a directory holding a Pebble checkpoint of the store (db/)
// and a manifest (manifest.json) with the offsets the checkpoint reflects.
// The offsets are also inside the checkpoint (keys 'o'), which is what a
// store opened from it resumes from; the manifest says it without opening
// it. Starting from a snapshot and tailing the log costs the snapshot's
// size plus the lag since it was taken, not the length of history
// (invariant 4), so kv-events retention can be bounded.
const (
	snapshotDB       = "db"
	snapshotManifest = "manifest.json"
)

// SnapshotManifest describes a snapshot.
type SnapshotManifest struct {
	SchemaVersion uint32    `json:"schema_version"`
	PebbleFormat  uint64    `json:"pebble_format"`
	Offsets       Offsets   `json:"offsets"`
	TakenAt       time.Time `json:"taken_at"` // wall clock, informative only
}

// Checkpoint writes a snapshot into dir, which must not exist. It flushes
// first (with the WAL off, a checkpoint holds only flushed data) and holds
// the commit lock, so the checkpoint holds whole batches and exactly the
// offsets it reports.
func (s *Store) Checkpoint(dir string) (SnapshotManifest, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return SnapshotManifest{}, err
	}
	if err := s.checkpointOpen(); err != nil {
		return SnapshotManifest{}, err
	}
	s.commitMu.Lock()
	if s.db == nil {
		s.commitMu.Unlock()
		return SnapshotManifest{}, errors.New("statestore: checkpoint of a closed store")
	}
	err := s.db.Flush()
	if err == nil {
		err = s.db.Checkpoint(filepath.Join(dir, snapshotDB))
	}
	man := SnapshotManifest{SchemaVersion: migrations.StoreSchemaVersion, PebbleFormat: uint64(migrations.PebbleFormat), Offsets: append(Offsets(nil), s.committed...), TakenAt: time.Now().UTC()}
	s.commitMu.Unlock()
	if err != nil {
		return SnapshotManifest{}, fmt.Errorf("statestore: checkpoint: %w", err)
	}
	b, _ := json.MarshalIndent(man, "", "  ")
	return man, os.WriteFile(filepath.Join(dir, snapshotManifest), b, 0o644)
}

// ReadSnapshotManifest reads a snapshot directory's manifest.
func ReadSnapshotManifest(dir string) (SnapshotManifest, error) {
	var man SnapshotManifest
	b, err := os.ReadFile(filepath.Join(dir, snapshotManifest))
	if err != nil {
		return man, fmt.Errorf("statestore: %s is not a snapshot: %w", dir, err)
	}
	return man, json.Unmarshal(b, &man)
}

// OpenFromSnapshot installs the snapshot in snapDir as the store in
// storeDir (which must not hold a store) and opens it. Table files (*.sst,
// *.blob) are immutable, so they are hard-linked when possible; everything
// else (MANIFEST, OPTIONS, markers) is copied, because a store opened on a
// hard link of its MANIFEST could write through it and change the snapshot.
func OpenFromSnapshot(snapDir, storeDir string, o Options) (*Store, error) {
	if _, err := ReadSnapshotManifest(snapDir); err != nil {
		return nil, err
	}
	if entries, err := os.ReadDir(storeDir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("statestore: %s already holds a store; remove it to bootstrap from a snapshot", storeDir)
	}
	if err := os.MkdirAll(storeDir, 0o755); err != nil {
		return nil, err
	}
	src := filepath.Join(snapDir, snapshotDB)
	entries, err := os.ReadDir(src)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		from, to := filepath.Join(src, e.Name()), filepath.Join(storeDir, e.Name())
		immutable := strings.HasSuffix(e.Name(), ".sst") || strings.HasSuffix(e.Name(), ".blob")
		if immutable && os.Link(from, to) == nil {
			continue
		}
		if err := copyFile(from, to); err != nil {
			return nil, err
		}
	}
	return Open(storeDir, o)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// SnapshotHandler serves GET requests with a fresh snapshot of the store as
// a tar stream (manifest.json, then db/...). The checkpoint is taken in a
// temporary directory under tmpRoot (on the store's file system, so it is
// hard links, not copies) and removed after the response. Mount it on the
// API, for example at /v1/state/snapshot.
func (s *Store) SnapshotHandler(tmpRoot string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		if err := os.MkdirAll(tmpRoot, 0o755); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		tmp, err := os.MkdirTemp(tmpRoot, "serve-")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer os.RemoveAll(tmp)
		dir := filepath.Join(tmp, "snap")
		man, err := s.Checkpoint(dir)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		w.Header().Set("X-Pdrouter-Offsets", man.Offsets.String())
		if err := writeTar(w, dir); err != nil {
			s.log.Warn("statestore: streaming a snapshot failed", "err", err)
		}
	})
}

func writeTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	add := func(rel string) error {
		f, err := os.Open(filepath.Join(dir, rel))
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: st.Size(), ModTime: st.ModTime(), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	}
	if err := add(snapshotManifest); err != nil {
		return err
	}
	entries, err := os.ReadDir(filepath.Join(dir, snapshotDB))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			if err := add(filepath.Join(snapshotDB, e.Name())); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// FetchSnapshot downloads a snapshot from a peer's SnapshotHandler into
// snapDir (which must not exist; it is written as snapDir+".part" and
// renamed when complete, so a torn download is never mistaken for a
// snapshot).
func FetchSnapshot(ctx context.Context, client *http.Client, url, snapDir string) (SnapshotManifest, error) {
	if client == nil {
		client = http.DefaultClient
	}
	part := snapDir + ".part"
	_ = os.RemoveAll(part)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return SnapshotManifest{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return SnapshotManifest{}, fmt.Errorf("statestore: fetch snapshot: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return SnapshotManifest{}, fmt.Errorf("statestore: fetch snapshot from %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := untar(resp.Body, part); err != nil {
		os.RemoveAll(part)
		return SnapshotManifest{}, fmt.Errorf("statestore: fetch snapshot from %s: %w", url, err)
	}
	man, err := ReadSnapshotManifest(part)
	if err != nil {
		os.RemoveAll(part)
		return SnapshotManifest{}, err
	}
	if man.SchemaVersion != migrations.StoreSchemaVersion {
		os.RemoveAll(part)
		return SnapshotManifest{}, fmt.Errorf("statestore: snapshot has store schema v%d, this build v%d: replay instead", man.SchemaVersion, migrations.StoreSchemaVersion)
	}
	return man, os.Rename(part, snapDir)
}

// untar extracts regular files only, refusing paths that leave dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			return fmt.Errorf("snapshot entry %q is not a regular file", h.Name)
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return fmt.Errorf("snapshot entry %q leaves the snapshot directory", h.Name)
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
}

// BootstrapFromPeer pulls a snapshot from a peer URL into
// <dataDir>/snapshots/ and opens it as <dataDir>/store; the caller then
// tails the log with a Materializer from the snapshot's offsets.
func BootstrapFromPeer(ctx context.Context, client *http.Client, url, dataDir string, o Options) (*Store, SnapshotManifest, error) {
	snap := filepath.Join(dataDir, "snapshots", "peer-"+time.Now().UTC().Format("20060102T150405.000000000"))
	if err := os.MkdirAll(filepath.Dir(snap), 0o755); err != nil {
		return nil, SnapshotManifest{}, err
	}
	man, err := FetchSnapshot(ctx, client, url, snap)
	if err != nil {
		return nil, man, err
	}
	s, err := OpenFromSnapshot(snap, filepath.Join(dataDir, StoreDirName), o)
	if err == nil {
		_ = os.RemoveAll(snap) // the store hard-links what it needs
	}
	return s, man, err
}
