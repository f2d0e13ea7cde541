package latmodel

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
)

// FuzzDecodeEntry: any bytes either fail to decode or decode to an entry that encodes
// back to the same bytes, and restoring it never panics nor overflows the sums.
func FuzzDecodeEntry(f *testing.F) {
	m := New(Config{})
	in := decider.LatencyInputs{Uncached: 1000, Queued: 5, DecodeRequests: 3, Transfer: 7}
	m.Decision("x", 42, decider.PathRemote, &in)
	m.Outcome("x", 50, 120.5, 9.25)
	seed, _ := m.AppendEntry(nil, "x")
	f.Add(seed)
	f.Add([]byte{1, 1, 0})
	f.Add([]byte{1, 7, 1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, v []byte) {
		e, err := decodeEntry(v)
		if err != nil {
			return
		}
		r := New(Config{})
		if err := r.Restore("id", v); err != nil {
			t.Fatalf("decoded but not restored: %v", err)
		}
		back, ok := r.AppendEntry(nil, "id")
		if !ok || !bytes.Equal(back, v) {
			t.Fatalf("re-encodes as %x, want %x", back, v)
		}
		r.Rebuilt(e.tD)
		_ = r.Fit()
		// Under a ULID id (the sample's rules, sample.go): the facts the rules
		// refuse are dropped, and what is kept keeps them.
		u := New(Config{})
		id := ulidAt(rand.New(rand.NewPCG(uint64(len(v)), 1)), max(e.tD, 0))
		if err := u.Restore(id, v); err != nil {
			t.Fatalf("decoded but not restored under a ULID id: %v", err)
		}
		if k := u.entries[id]; k != nil {
			switch {
			case k.flags == 0:
				t.Fatal("an entry without a fact was kept")
			case k.flags&fDecision != 0 && u.bucketOf(k.tD) != k.u,
				k.flags&fTTFT != 0 && u.bucketOf(u.skewed(k.tT)) < k.u,
				k.flags&fITL != 0 && u.bucketOf(u.skewed(k.tI)) < k.u:
				t.Fatalf("a fact outside its id's bucket was kept: %+v", k)
			}
		}
		u.Rebuilt(e.tD)
		_ = u.Fit()
	})
}
