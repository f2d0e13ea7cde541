package events_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// mergeableDelta is validDelta without its shared hashes, and its value.
func mergeableDelta(t testing.TB) (*pb.LoadDelta, []byte) {
	t.Helper()
	d := validDelta()
	d.Decisions[1].SharesHashesWith, d.Decisions[1].SharedHashes = 0, 0
	v, err := events.MarshalLoadDelta(d, deltaKey)
	if err != nil {
		t.Fatal(err)
	}
	return d, v
}

// TestMergeDeltas: two deltas concatenated decode to one holding both
// lists of entries; a delta whose decisions share hashes is not merged
// (its reference would name another entry), and a merge past the entry
// bound is refused.
func TestMergeDeltas(t *testing.T) {
	d, a := mergeableDelta(t)
	n, ok := events.DeltaEntries(a)
	if !ok || n != 4 {
		t.Fatalf("DeltaEntries = %d, %v; want 4 entries", n, ok)
	}
	m, entries, ok := events.MergeDeltas(a[:len(a):len(a)], n, a, n)
	if !ok || entries != 8 {
		t.Fatalf("merge: %d entries, %v", entries, ok)
	}
	got, err := events.DecodeLoadDelta([]byte(deltaKey), m, deltaLogTime)
	if err != nil {
		t.Fatalf("a merged delta is refused: %v", err)
	}
	want := proto.Clone(d).(*pb.LoadDelta)
	want.Decisions = append(want.Decisions, d.Decisions...)
	want.Lifecycle = append(want.Lifecycle, d.Lifecycle...)
	if !proto.Equal(got, want) {
		t.Fatalf("merged %v, want %v", got, want)
	}

	shared, err := events.MarshalLoadDelta(validDelta(), deltaKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := events.DeltaEntries(shared); ok {
		t.Fatal("a delta whose decisions share hashes was offered for merging")
	}
	for _, bad := range [][]byte{{0xff}, {0x20, 0x01}, append([]byte{0x2a, 0x00}, a...)} {
		if _, ok := events.DeltaEntries(bad); ok {
			t.Errorf("DeltaEntries accepted % x", bad[:min(len(bad), 4)])
		}
	}
	if _, _, ok := events.MergeDeltas(a, events.MaxDeltaEntries-3, a, n); ok {
		t.Fatal("a merge past MaxDeltaEntries was made")
	}
}

// FuzzMergeDeltas: whatever two values are, a merge of two deltas a reader
// accepts is accepted and holds exactly their entries.
func FuzzMergeDeltas(f *testing.F) {
	_, v := mergeableDelta(f)
	f.Add(v, v)
	f.Add(v[:len(v)/2], v)
	f.Add([]byte{}, v)
	f.Fuzz(func(t *testing.T, a, b []byte) {
		na, oka := events.DeltaEntries(a)
		nb, okb := events.DeltaEntries(b)
		da, erra := events.DecodeLoadDelta([]byte(deltaKey), a, deltaLogTime)
		db, errb := events.DecodeLoadDelta([]byte(deltaKey), b, deltaLogTime)
		if !oka || !okb || erra != nil || errb != nil {
			return
		}
		if na != len(da.GetDecisions())+len(da.GetLifecycle()) {
			t.Fatalf("DeltaEntries %d for a record of %d entries", na, len(da.GetDecisions())+len(da.GetLifecycle()))
		}
		m, n, ok := events.MergeDeltas(a[:len(a):len(a)], na, b, nb)
		if !ok {
			return
		}
		got, err := events.DecodeLoadDelta([]byte(deltaKey), m, deltaLogTime)
		if err != nil {
			t.Fatalf("two accepted deltas merged into a refused one: %v", err)
		}
		if n != len(got.GetDecisions())+len(got.GetLifecycle()) || len(got.GetDecisions()) != len(da.GetDecisions())+len(db.GetDecisions()) {
			t.Fatalf("merged %d entries, holds %d decisions and %d lifecycle", n, len(got.GetDecisions()), len(got.GetLifecycle()))
		}
	})
}
