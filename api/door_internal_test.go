package api

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
)

// listedState is a State whose worker list is given, counting how often
// it is listed; versioned adds WorkersVersion.
type listedState struct {
	State
	workers []WorkerStatus
	lists   atomic.Int64
}

func (s *listedState) Workers() []WorkerStatus {
	s.lists.Add(1)
	return slices.Clone(s.workers)
}

type versionedState struct {
	*listedState
	version uint64
}

func (s *versionedState) WorkersVersion() uint64 { return s.version }

func decodeWorker(id string, rank uint32, model, url string) WorkerStatus {
	return WorkerStatus{WorkerID: id, DPRank: rank, Pool: "decode", Model: model, HTTPURL: url}
}

// TestDoorFleetIndex: the door's tokenizer and model lookups list the
// fleet once per version of the worker list, not once per request, and
// see a change as soon as the version moves; a state without versions is
// listed every time.
func TestDoorFleetIndex(t *testing.T) {
	ls := &listedState{workers: []WorkerStatus{
		decodeWorker("w2", 0, "m", "http://b"), decodeWorker("w1", 1, "m", "http://a1"), decodeWorker("w1", 0, "m", "http://a0"),
		decodeWorker("w3", 0, "m", "http://b"), decodeWorker("w4", 0, "n", "http://c"),
		{WorkerID: "p1", Pool: "prefill", Model: "m", HTTPURL: "http://p"}, decodeWorker("w5", 0, "m", ""),
	}}
	vs := &versionedState{listedState: ls, version: 7}
	fleet := (&Server{deps: Deps{State: vs}}).doorDeps().Fleet
	for range 100 {
		if got := fleet.Tokenizers("m"); !slices.Equal(got, []string{"http://a0", "http://a1", "http://b"}) {
			t.Fatalf("tokenizers of m: %v", got)
		}
		if got := fleet.Models(); !slices.Equal(got, []string{"m", "n"}) {
			t.Fatalf("models: %v", got)
		}
	}
	if n := ls.lists.Load(); n != 1 {
		t.Fatalf("the fleet was listed %d times for 200 lookups at one version", n)
	}
	ls.workers = append(ls.workers, decodeWorker("w0", 0, "o", "http://d"))
	vs.version = 8
	if got := fleet.Tokenizers("o"); !slices.Equal(got, []string{"http://d"}) || !slices.Contains(fleet.Models(), "o") {
		t.Fatalf("a new version's worker not seen: %v %v", got, fleet.Models())
	}
	plain := (&Server{deps: Deps{State: ls}}).doorDeps().Fleet
	ls.lists.Store(0)
	plain.Tokenizers("m")
	ls.workers = ls.workers[:1]
	if got := plain.Tokenizers("m"); !slices.Equal(got, []string{"http://b"}) || ls.lists.Load() != 2 {
		t.Fatalf("an unversioned state: %v after %d lists", got, ls.lists.Load())
	}
}

// BenchmarkDoorTokenizers: the tokenizer lookup of a text request, in a
// fleet of 256 decode workers.
func BenchmarkDoorTokenizers(b *testing.B) {
	ls := &listedState{}
	for i := range 256 {
		ls.workers = append(ls.workers, decodeWorker(fmt.Sprintf("w%03d", i), 0, fmt.Sprintf("m%d", i%4), fmt.Sprintf("http://10.0.0.%d:8000", i)))
	}
	fleet := (&Server{deps: Deps{State: &versionedState{listedState: ls, version: 1}}}).doorDeps().Fleet
	b.ReportAllocs()
	for b.Loop() {
		if len(fleet.Tokenizers("m1")) != 64 {
			b.Fatal("wrong tokenizers")
		}
	}
}
