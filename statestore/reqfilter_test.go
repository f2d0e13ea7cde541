package statestore

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The filter never forgets an id while its bucket is in retention, across
// buckets and past a layer's capacity, and its false positives stay rare.
func TestRequestFilterNoFalseNegatives(t *testing.T) {
	const ret = int64(100 * time.Second)
	f := newRequestFilter(ret)
	const n = 3*minLayerKeys + 17 // several layers in one bucket
	at := func(i int) int64 { return int64(i%7) * ret / 5 }
	for i := range n {
		f.add(fmt.Sprintf("req-%d", i), at(i), 0)
	}
	for i := range n {
		if !mayContain(f, fmt.Sprintf("req-%d", i)) {
			t.Fatalf("req-%d forgotten", i)
		}
	}
	fp := 0
	for i := range 10_000 {
		if mayContain(f, fmt.Sprintf("new-%d", i)) {
			fp++
		}
	}
	if fp > 500 {
		t.Fatalf("%d false positives in 10,000", fp)
	}
	// Just before 6/5 ret + ret only decisions made at 6/5 ret are
	// present; their ids must stay, the buckets of decisions all absent go.
	now := 6*ret/5 + ret - 1
	f.sweep(now)
	for i := range n {
		if at(i)+ret > now && !mayContain(f, fmt.Sprintf("req-%d", i)) {
			t.Fatalf("req-%d forgotten after the sweep", i)
		}
	}
	if len(f.buckets) != 1 {
		t.Fatalf("%d buckets after the sweep, want 1", len(f.buckets))
	}
	f.sweep(now + 1)
	if len(f.buckets) != 0 || f.bytes != 0 {
		t.Fatalf("%d buckets, %d bytes after every decision left", len(f.buckets), f.bytes)
	}
}

// Every request with a decision is found, pending, committed, after a
// reopen and in a store opened from a snapshot (where the filter is filled
// from Pebble only), until its retention ends.
func TestRequestLookupThroughFilter(t *testing.T) {
	h := newHarnessWith(t, 2, Options{DecisionRetention: 40 * time.Second})
	h.put("d1", nil)
	const n = 40
	base := int64(1e12)
	at := func(i int) int64 { return base + int64(i)*int64(time.Second) } // 40 s: every bucket
	for i := range n {
		h.put("d1", decision(fmt.Sprintf("dec-%03d", i), fmt.Sprintf("req-%03d", i), "d1", at(i)))
	}
	check := func(s *Store, where string, present func(i int) bool) {
		t.Helper()
		for i := range n {
			id := fmt.Sprintf("req-%03d", i)
			sd, ok := s.DecisionForRequest(id)
			ref, rok := s.DecisionRefForRequest(id)
			if want := present(i); ok != want || rok != want {
				t.Fatalf("%s: %s found %v (ref %v), want %v", where, id, ok, rok, want)
			}
			if ok && (sd.Record.GetDecisionId() != fmt.Sprintf("dec-%03d", i) || ref.DecisionID != sd.Record.GetDecisionId()) {
				t.Fatalf("%s: %s → %s / %s", where, id, sd.Record.GetDecisionId(), ref.DecisionID)
			}
		}
		if _, ok := s.DecisionForRequest("never"); ok {
			t.Fatalf("%s: an unknown request found", where)
		}
	}
	all := func(int) bool { return true }
	check(h.s, "committed", all)
	h.reopen()
	check(h.s, "reopened", all)

	dir := t.TempDir()
	if _, err := h.s.Checkpoint(filepath.Join(dir, "snap")); err != nil {
		t.Fatal(err)
	}
	snap, err := OpenFromSnapshot(filepath.Join(dir, "snap"), filepath.Join(dir, "store"), Options{DecisionRetention: 40 * time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	check(snap, "from a snapshot", all)
	_ = snap.Close()

	// A decision at +60 s moves the clock: those before +20 s leave.
	h.put("d1", decision("dec-late", "req-late", "d1", at(60)))
	recent := func(i int) bool { return at(i)+int64(40*time.Second) > at(60) }
	check(h.s, "after retention", recent)
	h.reopen()
	check(h.s, "reopened after retention", recent)
	if _, ok := h.s.DecisionForRequest("req-late"); !ok {
		t.Fatal("req-late not found")
	}
}

func mayContain(f *requestFilter, id string) bool {
	indexed, _ := f.lookup(id)
	return indexed
}

// Replicas that raced on one request: the lowest decision id is the
// request's, whichever came first and whichever source serves it (the
// cache holds the higher one last, the request's two keys in two buckets).
func TestRequestLookupRaceThroughFilter(t *testing.T) {
	h := newHarnessWith(t, 2, Options{DecisionRetention: 40 * time.Second})
	h.put("d1", nil)
	base := int64(1e12)
	check := func(where string) {
		t.Helper()
		sd, ok := h.s.DecisionForRequest("req-x")
		ref, rok := h.s.DecisionRefForRequest("req-x")
		if !ok || !rok || sd.Record.GetDecisionId() != "dec-a" || ref.DecisionID != "dec-a" {
			t.Fatalf("%s: %s / %s, want dec-a", where, sd.Record.GetDecisionId(), ref.DecisionID)
		}
	}
	h.put("d1", decision("dec-a", "req-x", "d1", base))
	h.put("d1", decision("dec-b", "req-x", "d1", base+int64(15*time.Second)))
	check("both committed")
	h.reopen()
	check("reopened")
	h.put("d1", decision("dec-c", "req-x", "d1", base+int64(16*time.Second)))
	check("a third one committed")
	// A single decision in the cache is served from it.
	h.put("d1", decision("dec-y", "req-y", "d1", base+int64(16*time.Second)))
	if ref, ok := h.s.DecisionRefForRequest("req-y"); !ok || ref.DecisionID != "dec-y" || ref.DecodeWorker.GetWorkerId() != "d1" {
		t.Fatalf("req-y: %v %v", ref, ok)
	}
}

// Past its memory the filter stops growing and forgets nothing.
func TestRequestFilterMemoryBound(t *testing.T) {
	const ret = int64(100 * time.Second)
	f := newRequestFilter(ret)
	f.maxBytes = 64 << 10
	const n = 50_000 // ~60 KiB at 10 bits each, in one layer; more in layers
	for i := range n {
		f.add(fmt.Sprintf("req-%d", i), ret*2, 0)
		f.add(fmt.Sprintf("req-%d", i), ret*2, 0) // and into dups
	}
	if f.bytes > f.maxBytes+2*layerBytes(minLayerKeys) {
		t.Fatalf("%d bytes, over %d", f.bytes, f.maxBytes)
	}
	for i := range n {
		id := fmt.Sprintf("req-%d", i)
		if indexed, single := f.lookup(id); !indexed || single {
			t.Fatalf("%s: indexed %v, single %v", id, indexed, single)
		}
	}
}
