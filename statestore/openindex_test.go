package statestore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// TestOpenRequestsIndexInMemory: a store of open requests answers lookups
// of the log's decisions from the requests it holds, and writes no key of
// the request index ('d', 'q', 'e') for them: the held decisions are found
// by decision id and by request id, with their workers; one whose request
// it dropped is not (the API searches the log for it by its id's time); a
// request id decided twice names the lowest decision id; and the lookups
// survive a clean restart and a crash.
func TestOpenRequestsIndexInMemory(t *testing.T) {
	a := perfHarnessWith(t, openOptions())
	recs := openLog(t, a, 600)
	applyIn(t, a.s, recs, 40)
	a.log = append(a.log, recs...)
	if n := indexKeys(t, a.s); n != 0 {
		t.Fatalf("%d keys of the request index or the latency model in Pebble: a store of open requests keeps them in memory", n)
	}
	held, gone := checkOpenLookups(t, a.s, recs)
	if held == 0 || gone == 0 {
		t.Fatalf("%d decisions held and %d dropped: the log should leave both", held, gone)
	}

	t.Run("clean restart", func(t *testing.T) {
		a.reopen()
		if h, _ := checkOpenLookups(t, a.s, recs); h != held {
			t.Fatalf("%d decisions found after a restart, %d before", h, held)
		}
	})
	t.Run("a store of the former layout", func(t *testing.T) {
		// Its marker, written before the index left Pebble, has no layout:
		// its index keys would linger outside the digest's family, so the
		// store is refused, and serve rebuilds it by replay.
		b := perfHarnessWith(t, openOptions())
		applyIn(t, b.s, recs[:100], 50)
		if err := b.s.Close(); err != nil {
			t.Fatal(err)
		}
		b.s = nil
		db, err := pebble.Open(b.dir, &pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Set(openMarkerKey, nil, pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(b.dir, openOptions()); !errors.Is(err, ErrWrongSource) {
			t.Fatalf("opened a store of the former layout: %v", err)
		}
	})
	t.Run("crash", func(t *testing.T) {
		c := perfHarnessWith(t, openOptions())
		c.log = append(c.log, recs...)
		applyIn(t, c.s, recs[:2*len(recs)/3], 25)
		x := crashed(t, c, openOptions())
		applyIn(t, x, readAgain(x, recs), 30)
		if n := indexKeys(t, x); n != 0 {
			t.Fatalf("%d keys of the request index or the latency model in Pebble after a crash", n)
		}
		if h, _ := checkOpenLookups(t, x, recs); h != held {
			t.Fatalf("%d decisions found after a crash, %d without", h, held)
		}
	})
}

// indexKeys counts the keys of the request index and of the latency model
// in s's Pebble: the keys a store of facts writes per decision.
func indexKeys(t *testing.T, s *Store) int {
	t.Helper()
	n := 0
	for _, fam := range []byte{famDecision, famRequest, famExpiry, famLatency} {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{fam}, UpperBound: []byte{fam + 1}})
		if err != nil {
			t.Fatal(err)
		}
		for it.First(); it.Valid(); it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// checkOpenLookups looks every decision of recs up in s by decision id and
// by request id, and checks each answer against the open request s holds:
// found with its request and workers while held, not found once dropped.
// It returns how many were held and how many dropped.
func checkOpenLookups(t *testing.T, s *Store, recs []*kgo.Record) (held, gone int) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range recs {
		env, err := events.Decode(events.Names{}, r)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := env.Message.(*pb.LoadDelta)
		for _, e := range d.GetDecisions() {
			if seen[e.GetDecisionId()] {
				continue // a copy on another partition
			}
			seen[e.GetDecisionId()] = true
			var want *reqEntry
			s.Read(func(View) {
				for _, id := range s.st.act.byRequest[e.GetRequestId()] {
					if x := s.st.act.entries[id]; x != nil && x.decisionID() == e.GetDecisionId() && (want == nil || x.partition < want.partition) {
						want = x
					}
				}
			})
			sd, ok := s.Decision(e.GetDecisionId())
			ref, rok := s.DecisionRefForRequest(e.GetRequestId())
			if want == nil {
				gone++
				if ok || rok {
					t.Fatalf("decision %s: its request was dropped, and a lookup still finds it (%v, %v)", e.GetDecisionId(), ok, rok)
				}
				continue
			}
			held++
			if !ok || !rok {
				t.Fatalf("decision %s is held, and lookups by id (%v) or request (%v) miss it", e.GetDecisionId(), ok, rok)
			}
			got := sd.Record
			if got.GetDecisionId() != e.GetDecisionId() || got.GetRequestId() != e.GetRequestId() ||
				got.GetDecidedAtUnixNano() != e.GetDecidedAtUnixNano() || got.GetDecodeWorker().GetWorkerId() != e.GetDecodeWorker().GetWorkerId() ||
				got.GetMode() != modeOfDelta(e) || sd.Complete || sd.Partition != -1 {
				t.Fatalf("decision %s found as %v (complete %v, partition %d)", e.GetDecisionId(), got, sd.Complete, sd.Partition)
			}
			if ref.DecisionID != e.GetDecisionId() || ref.DecodeWorker.GetWorkerId() != e.GetDecodeWorker().GetWorkerId() ||
				ref.PrefillWorker.GetWorkerId() != e.GetPrefillWorker().GetWorkerId() {
				t.Fatalf("request %s names %+v, want decision %s", e.GetRequestId(), ref, e.GetDecisionId())
			}
		}
	}
	return held, gone
}

func modeOfDelta(e *pb.DecisionDelta) string {
	if e.GetLocal() {
		return "local"
	}
	return "remote"
}

// TestOpenRequestsIdempotencyWindow: Options.IdempotencyWindow holds an
// ended request, and so its decision for lookups, that long after it was
// decided; a store that crashed with such requests in its checkpoint
// reaches the digest of one that never stopped.
func TestOpenRequestsIdempotencyWindow(t *testing.T) {
	for _, w := range []time.Duration{0, 90 * time.Second} {
		t.Run(fmt.Sprint("window=", w), func(t *testing.T) {
			o := openOptions()
			o.IdempotencyWindow = w
			a := perfHarnessWith(t, o)
			recs := openLog(t, a, 600) // 120 s of decisions
			applyIn(t, a.s, recs, 40)
			a.log = append(a.log, recs...)
			// Decision 300, completed at once, 60 s before the log's end.
			var id, req string
			for _, r := range recs {
				env, err := events.Decode(events.Names{}, r)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range env.Message.(*pb.LoadDelta).GetDecisions() {
					if e.GetDecidedAtUnixNano() == 1e18+300*200e6 {
						id, req = e.GetDecisionId(), e.GetRequestId()
					}
				}
			}
			_, byID := a.s.Decision(id)
			_, byReq := a.s.DecisionRefForRequest(req)
			if want := w > 60*time.Second; byID != want || byReq != want {
				t.Fatalf("a request that ended 60 s ago, window %s: found by id %v, by request %v; want %v", w, byID, byReq, want)
			}
			c := perfHarnessWith(t, o)
			c.log = append(c.log, recs...)
			applyIn(t, c.s, recs[:2*len(recs)/3], 25)
			x := crashed(t, c, o)
			applyIn(t, x, readAgain(x, recs), 30)
			got, err := x.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if want := a.digest(); got.Hash != want.Hash {
				t.Fatalf("digest after a crash %s, without %s", got, want)
			}
		})
	}
}
