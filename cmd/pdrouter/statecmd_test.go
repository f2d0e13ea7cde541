package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/statestore"
)

// TestStateDigestReadsEveryLayout: `state digest` prints the digest of a
// replica's stopped store whatever it was built as: the whole records,
// load deltas with the group's requests as facts, or in memory (the
// default of serve), and a writer's store of load shares.
func TestStateDigestReadsEveryLayout(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    statestore.Options
		// noFacts: the store's only load delta does not decode, so a store
		// of facts holds no fact that tells its layout.
		noFacts bool
	}{
		{name: "decisions", o: statestore.Options{}},
		{name: "load-deltas/pebble", o: statestore.Options{Source: statestore.SourceLoadDeltas}},
		{name: "load-deltas/pebble/no facts", o: statestore.Options{Source: statestore.SourceLoadDeltas}, noFacts: true},
		{name: "load-deltas/memory", o: statestore.Options{Source: statestore.SourceLoadDeltas, PeerSums: true}},
		{name: "load-shares/memory", o: statestore.Options{Source: statestore.SourceLoadShares, PeerSums: true, ReplicaID: "test"}},
		{name: "load-shares/pebble", o: statestore.Options{Source: statestore.SourceLoadShares, ReplicaID: "test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			o := tc.o
			o.Registerer = prometheus.NewRegistry()
			s, err := statestore.Open(filepath.Join(dataDir, statestore.StoreDirName), o)
			if err != nil {
				t.Fatal(err)
			}
			d := &pb.DecisionRecord{DecisionId: "01JD0000000000000000000000", RequestId: "r1", Model: "m", Mode: "local",
				DecodeWorker: &pb.WorkerRef{WorkerId: "d1"}, DecidedAtUnixNano: 1e18, PromptTokens: 64, BlockSize: 16}
			var recs []*kgo.Record
			reg := &pb.WorkerRegistration{WorkerId: "d1", Pool: pb.Pool_POOL_DECODE, BlockSize: 16, DpSize: 1}
			for i, m := range []proto.Message{reg, decisionOrDelta(tc.o, d)} {
				r, err := events.NewRecord(events.Names{}, []byte("d1"), m)
				if err != nil {
					t.Fatal(err)
				}
				r.Offset = int64(i)
				if tc.noFacts && i == 1 {
					r.Value = []byte{0xff}
				}
				recs = append(recs, r)
			}
			if err := s.Apply(recs); err != nil {
				t.Fatal(err)
			}
			want, err := s.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			out, _, err := run(t, nil, "state", "digest", "--data-dir", dataDir)
			if err != nil || !strings.Contains(out, want.String()) {
				t.Fatalf("state digest: %v\n%s\nwant digest %s", err, out, want)
			}
			// The command left the store as it found it.
			o.Registerer = prometheus.NewRegistry()
			s, err = statestore.Open(filepath.Join(dataDir, statestore.StoreDirName), o)
			if err != nil {
				t.Fatalf("reopened as built: %v", err)
			}
			_ = s.Close()
		})
	}
}

// decisionOrDelta is d as a store of o's source reads it.
func decisionOrDelta(o statestore.Options, d *pb.DecisionRecord) proto.Message {
	if o.Source == statestore.SourceLoadDeltas || o.Source == statestore.SourceLoadShares {
		return &pb.LoadDelta{WriterId: "test", Decisions: []*pb.DecisionDelta{statestore.DecisionDeltaOf(d)}}
	}
	return d
}
