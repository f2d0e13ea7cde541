package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
	"github.com/pdrouter/pdrouter/events/logread"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/statestore"
)

// oneRecordInMemory keeps one cached record and one local decision: the
// earlier ones leave memory at once, and lookups find their headers.
var oneRecordInMemory = statestore.Options{DecisionCacheSize: 1, MaxLocalDecisions: 1}

// routeUntilHeader registers the fleet, routes three requests (ids
// prefix-0..2, one cached prompt) and returns their decision ids once the
// first is a committed header.
func routeUntilHeader(t *testing.T, h *harness, prefix string) []string {
	t.Helper()
	after := fleet(h)
	var ids []string
	for i := range 3 {
		var r routeResp
		h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": fmt.Sprintf("%s-%d", prefix, i), "token_ids": tokens(74, 0), "after": after}, &r)
		ids = append(ids, r.DecisionID)
	}
	committedHeader(t, h, ids[0])
	return ids
}

// committedHeader waits until the store serves decision id as a committed
// header (out of memory, its table left on the topic), and returns it.
func committedHeader(t *testing.T, h *harness, id string) statestore.StoredDecision {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		sd, ok := h.store.Decision(id)
		if ok && !sd.Complete {
			return sd
		}
		if time.Now().After(deadline) {
			t.Fatalf("decision %s: still not a committed header (found %v, complete %v)", id, ok, sd.Complete)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOldDecisionsAreReadFromTheLog: once a decision has left the replica's
// memory, its store keeps the header and the record's position only, and
// GET /v1/decisions, explain and an ?explain=true replay read the whole
// record from the decisions topic: byte for byte the record the log holds.
// When the topic no longer holds it, the answer is a precise 410; without a
// reader, a 503.
func TestOldDecisionsAreReadFromTheLog(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		h := newHarness(t, brokers, harnessOpt{store: oneRecordInMemory})
		after := fleet(h)
		var ids []string
		for i := range 4 {
			var r routeResp
			h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{
				"request_id": fmt.Sprintf("old-%d", i), "model": "m", "token_ids": tokens(74+16*i, 0), "after": after}, &r)
			ids = append(ids, r.DecisionID)
		}
		logged := readDecisions(t, h, len(ids))
		sd := committedHeader(t, h, ids[0])
		if len(sd.Record.GetCandidates()) != 0 || len(sd.Record.GetChains()) != 0 || sd.Partition < 0 || sd.Offset < 0 {
			t.Fatalf("the store kept more than the header, or no position: %d rows, %d chains, partition %d offset %d",
				len(sd.Record.GetCandidates()), len(sd.Record.GetChains()), sd.Partition, sd.Offset)
		}

		want, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(logged[ids[0]])
		if err != nil {
			t.Fatal(err)
		}
		got := h.mustDo(http.StatusOK, "GET", "/v1/decisions/"+ids[0], nil, nil)
		if !jsonEqual(t, got, want) {
			t.Fatalf("GET /v1/decisions/%s is not the logged record\n got %s\nwant %s", ids[0], got, want)
		}
		mustRecompute(t, h, ids[0])
		committedHeader(t, h, ids[1])
		var again routeResp
		h.mustDo(http.StatusOK, "POST", "/v1/route?explain=true", map[string]any{"request_id": "old-1", "token_ids": tokens(90, 0)}, &again)
		if !again.Idempotent || again.DecisionID != ids[1] || len(again.Candidates) != 3 {
			t.Fatalf("?explain=true replay of a committed decision: %+v", again)
		}
		if n := recordReads(t, h, "position", "ok"); n < 3 {
			t.Fatalf("pdrouter_decision_record_reads_total{result=ok} = %v, want ≥ 3", n)
		}

		// The topic's records deleted (retention shorter than the replica's):
		// the header is still known, the record is gone.
		deleteDecisionRecords(t, h)
		committedHeader(t, h, ids[2])
		body := string(h.mustDo(http.StatusGone, "GET", "/v1/decisions/"+ids[2], nil, nil))
		if !strings.Contains(body, `"decision_record_gone"`) || !strings.Contains(body, ids[2]) || !strings.Contains(body, "retention") {
			t.Fatalf("410 body does not say what is gone and why: %s", body)
		}
		h.mustDo(http.StatusGone, "GET", "/v1/decisions/"+ids[2]+"/explain", nil, nil)
		if n := recordReads(t, h, "position", "gone"); n != 2 {
			t.Fatalf("pdrouter_decision_record_reads_total{result=gone} = %v, want 2", n)
		}
	})
}

// mustRecompute fails the test unless the explain of decision id, read
// from the log, recomputes the decision (its pure check).
func mustRecompute(t *testing.T, h *harness, id string) {
	t.Helper()
	var exp struct {
		PureCheck struct {
			Identical bool `json:"identical"`
		} `json:"pure_check"`
	}
	if raw := h.mustDo(http.StatusOK, "GET", "/v1/decisions/"+id+"/explain", nil, &exp); !exp.PureCheck.Identical {
		t.Fatalf("explain of a decision read from the log did not recompute it: %s", raw)
	}
}

// deleteDecisionRecords deletes every record of h's decisions topic, as a
// topic retention shorter than the replica's does. It skips the test on a
// broker that cannot.
func deleteDecisionRecords(t *testing.T, h *harness) {
	t.Helper()
	adm := kadm.NewClient(kafkatest.Client(t, h.brokers))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, h.names.Physical(events.TopicDecisions))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.DeleteRecords(ctx, ends.Offsets()); err != nil {
		t.Skipf("this broker does not delete records (%v): the 410 case needs it", err)
	}
}

// TestOldDecisionsWithoutAReader: a server built without Deps.Records
// answers a committed decision's record with a 503 that says why.
func TestOldDecisionsWithoutAReader(t *testing.T) {
	h := newHarness(t, kafkatest.Fake(t), harnessOpt{store: oneRecordInMemory, noRecords: true})
	ids := routeUntilHeader(t, h, "nr")
	body := string(h.mustDo(http.StatusServiceUnavailable, "GET", "/v1/decisions/"+ids[0], nil, nil))
	if !strings.Contains(body, `"decision_record_unavailable"`) {
		t.Fatalf("503 body: %s", body)
	}
	// The header alone still answers a plain replay.
	var again routeResp
	h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": "nr-0", "token_ids": tokens(74, 0)}, &again)
	if !again.Idempotent || again.DecisionID != ids[0] || again.Mode == "" || again.DecodeWorker == "" {
		t.Fatalf("plain replay from the header: %+v", again)
	}
}

// readerFunc is a DecisionReader for failure injection: its lookups
// answer what the function returns, and its topic keeps records forever.
type readerFunc func() (*pb.DecisionRecord, error)

func (f readerFunc) ReadDecision(context.Context, int32, int64) (*pb.DecisionRecord, error) {
	return f()
}

func (f readerFunc) FindDecision(context.Context, string, string, time.Time) (*pb.DecisionRecord, error) {
	return f()
}

func (f readerFunc) SearchDecision(context.Context, string, time.Time, logread.ScanLimits) (*pb.DecisionRecord, int, error) {
	rec, err := f()
	return rec, 0, err
}

func (f readerFunc) Retention(context.Context) (time.Duration, error) { return 0, nil }

// positionless is the state of a replica that holds committed decisions
// without their positions on the decisions topic, as a peer's load delta
// makes them known: the store's own headers, their positions forgotten.
type positionless struct{ *api.StoreState }

func (s positionless) Decision(id string) (api.StoredDecision, bool) {
	return forgetPosition(s.StoreState.Decision(id))
}

func (s positionless) DecisionForRequest(id string) (api.StoredDecision, bool) {
	return forgetPosition(s.StoreState.DecisionForRequest(id))
}

func forgetPosition(sd api.StoredDecision, ok bool) (api.StoredDecision, bool) {
	if !sd.Complete {
		sd.Partition, sd.Offset = -1, -1
	}
	return sd, ok
}

func withoutPositions(s *api.StoreState) api.State { return positionless{s} }

// TestOldDecisionReadFailures: what the reader of the decisions topic
// returns decides the answer, whether the decision is read at its position
// or searched for by its decode worker and decided_at. A failed read is a
// 503 that names the record and keeps the cause (here a broker address) in
// the log; a record that is not the decision, or not where its time places
// it, is a 500, never served as the decision; a record gone is a 410; a
// search that reached its bounds is a 503 that points to the deciding
// replica.
func TestOldDecisionReadFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		read   readerFunc
		status int
		code   string
		result string
		search bool // the case can only happen to a search
	}{
		{"broker down", func() (*pb.DecisionRecord, error) {
			return nil, errors.New("dial tcp secret-broker.internal:9092: connection refused")
		}, http.StatusServiceUnavailable, "decision_log_unavailable", "error", false},
		{"another decision", func() (*pb.DecisionRecord, error) {
			return &pb.DecisionRecord{DecisionId: "someone-else"}, nil
		}, http.StatusInternalServerError, "internal", "error", false},
		{"not a decision", func() (*pb.DecisionRecord, error) {
			return nil, fmt.Errorf("%w: not a decision record", api.ErrNotTheRecord)
		}, http.StatusInternalServerError, "internal", "error", false},
		{"gone", func() (*pb.DecisionRecord, error) {
			return nil, fmt.Errorf("%w: deleted", api.ErrRecordGone)
		}, http.StatusGone, "decision_record_gone", "gone", false},
		{"not found", func() (*pb.DecisionRecord, error) {
			return nil, fmt.Errorf("%w: read past the window", api.ErrRecordNotFound)
		}, http.StatusInternalServerError, "internal", "not_found", true},
		{"search bounds", func() (*pb.DecisionRecord, error) {
			return nil, fmt.Errorf("%w: 10000 records", api.ErrSearchLimit)
		}, http.StatusServiceUnavailable, "decision_record_unavailable", "limit", true},
	} {
		for _, lookup := range []string{"position", "search"} {
			if tc.search && lookup != "search" {
				continue
			}
			t.Run(tc.name+"/"+lookup, func(t *testing.T) {
				o := harnessOpt{store: oneRecordInMemory, records: tc.read}
				if lookup == "search" {
					o.state = withoutPositions
				}
				h := newHarness(t, kafkatest.Fake(t), o)
				ids := routeUntilHeader(t, h, "rf")
				body := string(h.mustDo(tc.status, "GET", "/v1/decisions/"+ids[0], nil, nil))
				if !strings.Contains(body, `"`+tc.code+`"`) || strings.Contains(body, "secret-broker") || strings.Contains(body, "someone-else") {
					t.Fatalf("%d body: %s", tc.status, body)
				}
				if n := recordReads(t, h, lookup, tc.result); n != 1 {
					t.Fatalf("pdrouter_decision_record_reads_total{lookup=%s,result=%s} = %v, want 1", lookup, tc.result, n)
				}
				if n := recordReads(t, h, lookup, "ok"); n != 0 {
					t.Fatalf("a failed read counted as ok (%v)", n)
				}
			})
		}
	}
}

// TestPeerDecisionsAreFoundOnTheLog: a replica that holds committed
// decisions without their positions (as it will hold a peer's, known from
// its load delta) finds each whole record on the decisions topic by its
// decode worker's partition and its decided_at, the record's Kafka
// timestamp: GET /v1/decisions and explain answer byte for byte the record
// the log holds, among the other decisions of its partition. Once the
// topic's records are deleted, the answer is a 410.
func TestPeerDecisionsAreFoundOnTheLog(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		// The API's clock runs a year behind the wall clock, so that a
		// record stamped when it is written, not with its decided_at,
		// is told apart.
		var tick atomic.Int64
		clock := func() time.Time { return time.Unix(1764400100, 0).Add(time.Duration(tick.Add(1)) * time.Millisecond) }
		h := newHarness(t, brokers, harnessOpt{store: oneRecordInMemory, state: withoutPositions, apiOpts: []api.Option{api.WithClock(clock)}})
		after := fleet(h)
		const n = 8
		var ids []string
		for i := range n {
			var r routeResp
			h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{
				"request_id": fmt.Sprintf("peer-%d", i), "model": "m", "token_ids": tokens(74+16*i, uint32(i%2)*1000), "after": after}, &r)
			ids = append(ids, r.DecisionID)
		}
		logged := readDecisions(t, h, n)

		// Every record is stamped with its decided_at, to the millisecond.
		workers := map[string]bool{}
		for _, r := range kafkatest.ReadAll(t, brokers, h.names.Physical(events.TopicDecisions)) {
			env, err := events.Decode(h.names, r)
			if err != nil {
				t.Fatal(err)
			}
			d := env.Message.(*pb.DecisionRecord)
			if want := time.Unix(0, d.GetDecidedAtUnixNano()).UnixMilli(); r.Timestamp.UnixMilli() != want {
				t.Errorf("decision %s: record stamped %d ms, want its decided_at %d ms", d.GetDecisionId(), r.Timestamp.UnixMilli(), want)
			}
			workers[d.GetDecodeWorker().GetWorkerId()] = true
		}
		t.Logf("%d decisions over decode workers %v", n, workers)

		// All but the last leave memory (one record cached): each is found.
		for _, id := range ids[:n-1] {
			sd := committedHeader(t, h, id)
			if sd.Partition < 0 {
				t.Fatalf("decision %s: the store holds no position; the test strips it in the API's view only", id)
			}
			want, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(logged[id])
			if err != nil {
				t.Fatal(err)
			}
			got := h.mustDo(http.StatusOK, "GET", "/v1/decisions/"+id, nil, nil)
			if !jsonEqual(t, got, want) {
				t.Fatalf("GET /v1/decisions/%s is not the logged record\n got %s\nwant %s", id, got, want)
			}
		}
		mustRecompute(t, h, ids[0])
		if got := recordReads(t, h, "search", "ok"); got != n {
			t.Fatalf("pdrouter_decision_record_reads_total{lookup=search,result=ok} = %v, want %d", got, n)
		}
		if got := recordReads(t, h, "position", "ok"); got != 0 {
			t.Fatalf("pdrouter_decision_record_reads_total{lookup=position,result=ok} = %v: a record was read by a position the API did not have", got)
		}

		// The topic's records deleted: the search starts at the log start
		// offset, and the record is gone.
		deleteDecisionRecords(t, h)
		body := string(h.mustDo(http.StatusGone, "GET", "/v1/decisions/"+ids[1], nil, nil))
		if !strings.Contains(body, `"decision_record_gone"`) || !strings.Contains(body, ids[1]) || !strings.Contains(body, "decode worker") {
			t.Fatalf("410 body does not say what is gone and where it was sought: %s", body)
		}
		if got := recordReads(t, h, "search", "gone"); got != 1 {
			t.Fatalf("pdrouter_decision_record_reads_total{lookup=search,result=gone} = %v, want 1", got)
		}
	})
}

// TestFindDecisionSkipsWhatIsNotIt: in the window of the decision sought,
// records of its decode worker that do not decode (garbage, a tombstone)
// or are another decision are passed over: none stops the search, none is
// taken for the decision. A decision that is not there, with a record of
// its partition stamped past the window, is ErrRecordNotFound.
func TestFindDecisionSkipsWhatIsNotIt(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		names := events.Names{Prefix: kafkatest.Prefix(t)}
		kafkatest.Migrate(t, brokers, names.Prefix)
		topic := names.Physical(events.TopicDecisions)
		key := events.WorkerKey("decode-1")
		want := eventstest.Decision(4, 2, 64) // decode-1's
		at := time.Unix(0, want.GetDecidedAtUnixNano())
		decision := func(id string, after time.Duration) *kgo.Record {
			d := proto.Clone(want).(*pb.DecisionRecord)
			d.DecisionId, d.DecidedAtUnixNano = id, at.Add(after).UnixNano()
			r, err := events.NewRecord(names, key, d)
			if err != nil {
				t.Fatal(err)
			}
			r.Timestamp = at.Add(after) // as the API stamps it
			return r
		}
		recs := []*kgo.Record{
			{Topic: topic, Key: key, Value: []byte{0xff, 0xff, 0xff}, Timestamp: at,
				Headers: []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte("pdrouter.events.v1.DecisionRecord")}}},
			{Topic: topic, Key: key, Timestamp: at}, // a tombstone
			decision("01JDX3Q8W6ZK2M4N5P6R7S8T9W", 0),
			decision(want.GetDecisionId(), 0),
			decision("01JDX3Q8W6ZK2M4N5P6R7S8T9X", 2*time.Minute),
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := kafkatest.Client(t, brokers).ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs[1:] {
			if r.Partition != recs[0].Partition {
				t.Fatalf("records keyed %s went to partitions %d and %d", key, recs[0].Partition, r.Partition)
			}
		}

		rd := api.NewLogDecisionReader(kafkatest.Client(t, brokers), names)
		got, err := rd.FindDecision(ctx, want.GetDecisionId(), "decode-1", at)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("found decision %s, not the one sought", got.GetDecisionId())
		}
		if _, err := rd.FindDecision(ctx, "01JDX3Q8W6ZK2M4N5P6R7S8T9Y", "decode-1", at); !errors.Is(err, api.ErrRecordNotFound) {
			t.Fatalf("a decision that is not there: error %v, want ErrRecordNotFound", err)
		}
	})
}

// recordReads is pdrouter_decision_record_reads_total{lookup,result} of h.
func recordReads(t *testing.T, h *harness, lookup, result string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "pdrouter_decision_record_reads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["lookup"] == lookup && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("pdrouter_decision_record_reads_total{lookup=%q,result=%q} is not registered", lookup, result)
	return 0
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return bytes.Equal(xs, ys)
}
