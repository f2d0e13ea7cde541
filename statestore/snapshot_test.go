package statestore

import (
	"context"
	"math/rand/v2"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A snapshot, local or pulled over HTTP, opens to the same digest and
// offsets, and the new store goes on applying where the snapshot stopped.
func TestSnapshotBootstrap(t *testing.T) {
	h := newHarness(t, 4)
	recs := genRecords(h, 21, 3000, 10)
	applyInBatches(h, recs[:2000], rand.New(rand.NewPCG(1, 2)))
	want := h.digest()

	dir := t.TempDir()
	man, err := h.s.Checkpoint(filepath.Join(dir, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	if man.Offsets.String() != want.Offsets.String() {
		t.Fatalf("manifest offsets %s, want %s", man.Offsets, want.Offsets)
	}
	local, err := OpenFromSnapshot(filepath.Join(dir, "snap"), filepath.Join(dir, "local"), Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	if d, _ := local.Digest(); d.Hash != want.Hash {
		t.Fatalf("local snapshot: %s, want %s", d, want)
	}

	srv := httptest.NewServer(h.s.SnapshotHandler(filepath.Join(dir, "tmp")))
	defer srv.Close()
	peer, man2, err := BootstrapFromPeer(context.Background(), srv.Client(), srv.URL, filepath.Join(dir, "peer"), Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if d, _ := peer.Digest(); d.Hash != want.Hash || man2.Offsets.String() != want.Offsets.String() {
		t.Fatalf("peer snapshot: %s at %s, want %s", d, man2.Offsets, want)
	}
	// Tail the rest (the whole log is offered; applied offsets are skipped).
	h.apply(recs[2000:]...)
	if err := peer.Apply(recs); err != nil {
		t.Fatal(err)
	}
	if d, dw := mustDigest(t, peer), h.digest(); d.Hash != dw.Hash {
		t.Fatalf("after tailing: %s, want %s", d, dw)
	}
}

func mustDigest(t testing.TB, s *Store) Digest {
	t.Helper()
	d, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
