package main

import (
	"sync"
	"time"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// floorShares is the floor replica's load-share source with --load-deltas
// snapshots: each group commit's snapshot names the decode workers that the
// commit's appends touched, as a replica's names the workers whose share
// its decisions and lifecycle events changed, so the floor's peer fetches
// the stream a real peer fetches. The counts are synthetic (a floor keeps
// no load) but pass every reader's rule.
type floorShares struct {
	writer string
	keys   [][]byte       // decode worker ids, by index
	index  map[string]int // decode worker id → index, to hand a snapshot back

	mu      sync.Mutex
	touched []bool // by worker index, since the last snapshot taken
	pending int    // true entries of touched
	seq     uint64
}

func newFloorShares(writer string, keys [][]byte) *floorShares {
	s := &floorShares{writer: writer, keys: keys, index: make(map[string]int, len(keys)), touched: make([]bool, len(keys))}
	for i, k := range keys {
		s.index[string(k)] = i
	}
	return s
}

// touch marks decode worker k's share as changed; the append that changed
// it follows, so the commit that carries it takes the worker too.
func (s *floorShares) touch(k int) {
	s.mu.Lock()
	if !s.touched[k] {
		s.touched[k] = true
		s.pending++
	}
	s.mu.Unlock()
}

// TakeShares implements api.SharesSource: the touched workers in index
// order, with the next seq.
func (s *floorShares) TakeShares() *pb.LoadShares {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == 0 {
		return nil
	}
	s.seq++
	snap := &pb.LoadShares{WriterId: s.writer, Seq: s.seq, ClockUnixNano: time.Now().UnixNano(), Shares: make([]*pb.WorkerShare, 0, s.pending)}
	for k, t := range s.touched {
		if t {
			snap.Shares = append(snap.Shares, &pb.WorkerShare{Worker: &pb.WorkerRef{WorkerId: string(s.keys[k])},
				DecodeBlocks: 256, Requests: 4, PrefillTokens: 4096, RecentDecisions: 8, RecentLocalTokens: 1024})
			s.touched[k] = false
		}
	}
	s.pending = 0
	return snap
}

// SharesNotSent implements api.SharesSource: the snapshot's workers go
// with the next one.
func (s *floorShares) SharesNotSent(snap *pb.LoadShares) {
	for _, e := range snap.GetShares() {
		if k, ok := s.index[e.GetWorker().GetWorkerId()]; ok {
			s.touch(k)
		}
	}
}

// SharesSent implements api.SharesSource: a floor keeps nothing in flight.
func (s *floorShares) SharesSent(*pb.LoadShares) {}

// SharesChanged implements api.SharesSource: never, since every change
// comes with an append, whose commit takes the snapshot.
func (s *floorShares) SharesChanged() <-chan struct{} { return nil }
