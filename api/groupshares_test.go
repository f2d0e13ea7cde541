package api

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// scriptedShares is a SharesSource that gives a new valid snapshot to each
// TakeShares while give is set, and records what is handed back.
type scriptedShares struct {
	writer  string
	changed chan struct{}
	// block, when set, is received from by TakeShares before it answers.
	block chan struct{}

	mu      sync.Mutex
	give    bool
	seq     uint64
	entered int // TakeShares calls begun, blocked or not
	taken   int // TakeShares calls
	notSent []*pb.LoadShares
	sent    int                  // SharesSent calls
	mangle  func(*pb.LoadShares) // when set, applied to each snapshot given
}

func newScriptedShares(writer string, give bool) *scriptedShares {
	return &scriptedShares{writer: writer, give: give, changed: make(chan struct{}, 1)}
}

func (s *scriptedShares) TakeShares() *pb.LoadShares {
	s.mu.Lock()
	s.entered++
	s.mu.Unlock()
	if s.block != nil {
		<-s.block
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taken++
	if !s.give {
		return nil
	}
	s.seq++
	snap := &pb.LoadShares{WriterId: s.writer, Seq: s.seq, ClockUnixNano: time.Now().UnixNano(),
		Shares: []*pb.WorkerShare{{Worker: &pb.WorkerRef{WorkerId: "decode-0"}, DecodeBlocks: 8, Requests: 1},
			{Worker: &pb.WorkerRef{WorkerId: "decode-1"}, PrefillTokens: 512}}}
	if s.mangle != nil {
		s.mangle(snap)
	}
	return snap
}

func (s *scriptedShares) SharesNotSent(snap *pb.LoadShares) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notSent = append(s.notSent, snap)
}

func (s *scriptedShares) SharesSent(*pb.LoadShares) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent++
}

func (s *scriptedShares) SharesChanged() <-chan struct{} { return s.changed }

func (s *scriptedShares) counts() (taken int, notSent []*pb.LoadShares) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taken, append([]*pb.LoadShares(nil), s.notSent...)
}

func (s *scriptedShares) sentCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent
}

// sharingSetup migrates a fake broker and returns it, its names, a
// scripted source that gives snapshots or not, and a GroupLog sharing them.
func sharingSetup(t *testing.T, give bool) ([]string, events.Names, *scriptedShares, *GroupLog) {
	t.Helper()
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	names := events.Names{Prefix: prefix}
	src := newScriptedShares("router-0", give)
	return brokers, names, src, sharingLog(t, brokers, names, src)
}

// sharingLog is a GroupLog on brokers under names whose shares come from
// src, with no keepalive commit during the test.
func sharingLog(t *testing.T, brokers []string, names events.Names, src SharesSource, opts ...kgo.Opt) *GroupLog {
	t.Helper()
	cl := kafkatest.Client(t, brokers, append(GroupLogClientOpts(), opts...)...)
	l := NewGroupLog(cl, names, 64<<20, prometheus.NewRegistry())
	l.sharesEvery = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := l.ShareLoad(ctx, src, "router-0", nil); err != nil {
		t.Fatal(err)
	}
	return l
}

func outcomeRec(names events.Names, i int) *kgo.Record {
	return &kgo.Record{Topic: names.Physical(events.TopicOutcomes), Key: []byte("w"), Value: []byte{byte(i)}}
}

func shareResults(l *GroupLog) (written, failed, unencodable float64) {
	r := l.met.shares.records
	return testutil.ToFloat64(r.WithLabelValues(shareWritten)), testutil.ToFloat64(r.WithLabelValues(shareFailed)),
		testutil.ToFloat64(r.WithLabelValues(shareUnencodable))
}

// Each group commit carries the source's snapshot: by the time an append
// returns, its commit's snapshot is acknowledged too (one flush), one
// record per commit, keyed by the writer, in seq order in one partition,
// decoding as every peer decodes it.
func TestGroupLogSharesRideWithTheGroup(t *testing.T) {
	brokers, names, src, l := sharingSetup(t, true)
	const appends = 5
	for i := range appends {
		if _, err := l.Append(context.Background(), outcomeRec(names, i)); err != nil {
			t.Fatal(err)
		}
		if w, _, _ := shareResults(l); w != float64(i+1) {
			t.Fatalf("after append %d returned, %v snapshots written; want %d: the snapshot did not go with its group", i, w, i+1)
		}
	}
	if n := l.ShareRecords(); n != appends {
		t.Fatalf("ShareRecords = %d; want %d", n, appends)
	}
	recs := kafkatest.ReadAll(t, brokers, names.Physical(events.TopicLoadShares))
	if len(recs) != appends {
		t.Fatalf("%d load-shares records for %d sequential commits; want one per commit", len(recs), appends)
	}
	for i, r := range recs {
		env, err := events.Decode(names, r)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		s := env.Message.(*pb.LoadShares)
		if string(r.Key) != "router-0" || s.GetSeq() != uint64(i+1) || r.Partition != recs[0].Partition {
			t.Fatalf("record %d: key %q seq %d partition %d; want router-0, seq %d, one partition", i, r.Key, s.GetSeq(), r.Partition, i+1)
		}
	}
	var m = l.met.shares.workers
	if n := testutil.CollectAndCount(m); n != 1 {
		t.Fatalf("pdrouter_load_share_record_workers: %d series", n)
	}
	if _, notSent := src.counts(); len(notSent) != 0 {
		t.Fatalf("%d snapshots handed back, none failed", len(notSent))
	}
	// Each written snapshot was reported to its source as on the log.
	if n := src.sentCount(); n != appends {
		t.Fatalf("SharesSent called %d times for %d snapshots written", n, appends)
	}
}

// A snapshot whose produce fails goes back to its source, is counted as
// failed, and never fails the appends of its group.
func TestGroupLogHandsBackAFailedSnapshot(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	// The log's load-shares topic does not exist (another prefix, never
	// migrated); the append goes to a topic that does.
	src := newScriptedShares("router-0", true)
	l := sharingLog(t, brokers, events.Names{Prefix: prefix + "missing."}, src, kgo.RecordDeliveryTimeout(2*time.Second))
	if _, err := l.Append(context.Background(), outcomeRec(events.Names{Prefix: prefix}, 0)); err != nil {
		t.Fatalf("the append failed with its snapshot: %v", err)
	}
	taken, notSent := src.counts()
	if taken != 1 || len(notSent) != 1 || notSent[0].GetSeq() != 1 || src.sentCount() != 0 {
		t.Fatalf("%d snapshots taken, %v handed back, %d reported on the log; want the one taken handed back", taken, notSent, src.sentCount())
	}
	if w, f, u := shareResults(l); w != 0 || f != 1 || u != 0 {
		t.Fatalf("written %v failed %v unencodable %v; want 0 1 0", w, f, u)
	}
}

// A snapshot the record's own rules refuse is never produced: counted as
// unencodable, handed back, and its group's appends still succeed.
func TestGroupLogRefusesAnUnencodableSnapshot(t *testing.T) {
	brokers, names, src, l := sharingSetup(t, true)
	src.mangle = func(s *pb.LoadShares) { s.WriterId = "router-1" } // not the key; set before the first commit
	if _, err := l.Append(context.Background(), outcomeRec(names, 0)); err != nil {
		t.Fatal(err)
	}
	if _, notSent := src.counts(); len(notSent) != 1 {
		t.Fatalf("%d snapshots handed back; want the unencodable one", len(notSent))
	}
	if w, f, u := shareResults(l); w != 0 || f != 0 || u != 1 {
		t.Fatalf("written %v failed %v unencodable %v; want 0 0 1", w, f, u)
	}
	if recs := kafkatest.ReadAll(t, brokers, names.Physical(events.TopicLoadShares)); len(recs) != 0 {
		t.Fatalf("%d load-shares records; want none", len(recs))
	}
}

// With nothing queued, a change signal alone commits the snapshot: one
// commit per signal, and signals during a commit lead to one more commit
// after it, not one each.
func TestGroupLogSignalAloneCommitsTheSnapshot(t *testing.T) {
	brokers, names, src, l := sharingSetup(t, true)
	src.changed <- struct{}{}
	waitFor(t, func() bool { w, _, _ := shareResults(l); return w == 1 })
	time.Sleep(100 * time.Millisecond)
	if taken, _ := src.counts(); taken != 1 {
		t.Fatalf("one signal took %d snapshots; want 1", taken)
	}

	src.block = make(chan struct{})
	src.changed <- struct{}{} // its commit waits in TakeShares
	// Until the commit is in TakeShares, the signals below could all be
	// taken before it starts, and it would answer them all.
	waitFor(t, func() bool { src.mu.Lock(); defer src.mu.Unlock(); return src.entered == 2 })
	for range 3 {
		src.changed <- struct{}{} // each is received by the signal loop, during that commit
	}
	waitFor(t, func() bool { return len(src.changed) == 0 })
	close(src.block)
	waitFor(t, func() bool { w, _, _ := shareResults(l); return w == 3 })
	time.Sleep(100 * time.Millisecond)
	if taken, _ := src.counts(); taken != 3 {
		t.Fatalf("a signal and three during its commit took %d snapshots in all; want 3 (the first, its own, one after)", taken)
	}
	if recs := kafkatest.ReadAll(t, brokers, names.Physical(events.TopicLoadShares)); len(recs) != 3 {
		t.Fatalf("%d load-shares records; want 3", len(recs))
	}
}

// A source with nothing to send adds no record to any commit, and a signal
// then costs a TakeShares call and nothing else.
func TestGroupLogNoSnapshotNoRecord(t *testing.T) {
	brokers, names, src, l := sharingSetup(t, false)
	for i := range 3 {
		if _, err := l.Append(context.Background(), outcomeRec(names, i)); err != nil {
			t.Fatal(err)
		}
	}
	src.changed <- struct{}{}
	waitFor(t, func() bool { taken, _ := src.counts(); return taken == 4 })
	if recs := kafkatest.ReadAll(t, brokers, names.Physical(events.TopicLoadShares)); len(recs) != 0 {
		t.Fatalf("%d load-shares records without a snapshot", len(recs))
	}
	if w, f, u := shareResults(l); w+f+u != 0 {
		t.Fatalf("written %v failed %v unencodable %v without a snapshot", w, f, u)
	}
}
