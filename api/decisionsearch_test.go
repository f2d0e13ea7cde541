package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/eventstest"
	"github.com/pdrouter/pdrouter/events/logread"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/internal/ulid"
	"github.com/pdrouter/pdrouter/statestore"
)

// TestDecisionFoundOnTheLogAfterTheIndexForgotIt: a replica keeps decisions
// for a second (--decision-retention 1s); once its index has forgotten a
// decision, GET /v1/decisions/{id} and its explain find the record on the
// decisions topic, byte for byte the record the log holds, and say so in
// X-Pdrouter-Decision-Source. A decision the index holds still comes from
// it.
func TestDecisionFoundOnTheLogAfterTheIndexForgotIt(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		h := newHarness(t, brokers, harnessOpt{store: statestore.Options{DecisionRetention: time.Second}})
		after := fleet(h)
		var first routeResp
		h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": "forgot-0", "token_ids": tokens(74, 0), "after": after}, &first)
		logged := readDecisions(t, h, 1)[first.DecisionID]
		at, err := ulid.Time(first.DecisionID)
		if err != nil || !at.Equal(time.Unix(0, logged.GetDecidedAtUnixNano()).Truncate(time.Millisecond)) {
			t.Fatalf("decision id %s: time %s, %v; want decided_at %d cut to the millisecond", first.DecisionID, at, err, logged.GetDecidedAtUnixNano())
		}

		// A later decision moves the decisions clock past the first one's
		// retention.
		time.Sleep(time.Until(at.Add(1100 * time.Millisecond)))
		var second routeResp
		h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": "forgot-1", "token_ids": tokens(90, 0)}, &second)
		deadline := time.Now().Add(20 * time.Second)
		for _, ok := h.store.Decision(first.DecisionID); ok; _, ok = h.store.Decision(first.DecisionID) {
			if time.Now().After(deadline) {
				t.Fatalf("the index still holds decision %s past its retention", first.DecisionID)
			}
			time.Sleep(20 * time.Millisecond)
		}

		want, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(logged)
		if err != nil {
			t.Fatal(err)
		}
		code, hdr, got := h.do("GET", "/v1/decisions/"+first.DecisionID, nil, nil)
		if code != http.StatusOK || hdr.Get(api.HeaderDecisionSource) != "log" {
			t.Fatalf("GET a forgotten decision: %d, source %q: %s", code, hdr.Get(api.HeaderDecisionSource), got)
		}
		if !jsonEqual(t, got, want) {
			t.Fatalf("GET /v1/decisions/%s is not the logged record\n got %s\nwant %s", first.DecisionID, got, want)
		}
		mustRecompute(t, h, first.DecisionID)
		if _, hdr, _ := h.do("GET", "/v1/decisions/"+second.DecisionID, nil, nil); hdr.Get(api.HeaderDecisionSource) != "index" {
			t.Fatalf("a decision the index holds: source %q, want index", hdr.Get(api.HeaderDecisionSource))
		}
		// The record and its explain, a record read each at least.
		searchCounts(t, h, map[string]float64{"found": 2, "not_found": 0}, 2, 2)
	})
}

// TestDecisionSearchAnswers: what no search would find is answered without
// one: a malformed id 400, an id stamped in the future or before the
// decisions topic's retention 404 saying the topic was not searched; an id
// the topic does not hold is searched for, on every partition, and 404
// says so. Each is counted.
func TestDecisionSearchAnswers(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		h := newHarness(t, brokers, harnessOpt{})
		setDecisionsRetention(t, h, time.Hour)
		after := fleet(h)
		var r routeResp
		h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": "answers-0", "token_ids": tokens(74, 0), "after": after}, &r)
		at, err := ulid.Time(r.DecisionID)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			id, code, says string
			status         int
		}{
			{"nope", "invalid_decision_id", "not 26 characters", http.StatusBadRequest},
			{strings.ToLower(r.DecisionID), "invalid_decision_id", "ULID alphabet", http.StatusBadRequest},
			{"8" + r.DecisionID[1:], "invalid_decision_id", "128 bits", http.StatusBadRequest},
			{ulid.New(time.Now().Add(3 * time.Minute)), "unknown_decision", "was not searched", http.StatusNotFound},
			{ulid.New(time.Now().Add(-2 * time.Hour)), "unknown_decision", "older than the decisions topic keeps records", http.StatusNotFound},
		} {
			for _, path := range []string{"/v1/decisions/" + tc.id, "/v1/decisions/" + tc.id + "/explain"} {
				body := string(h.mustDo(tc.status, "GET", path, nil, nil))
				if !strings.Contains(body, `"`+tc.code+`"`) || !strings.Contains(body, tc.says) {
					t.Errorf("GET %s: %s, want %s saying %q", path, body, tc.code, tc.says)
				}
			}
		}
		// Ids no search would find make no search.
		searchCounts(t, h, map[string]float64{"refused": 10, "found": 0}, 0, 0)

		// Another id of the decision's very millisecond: the window that
		// holds the decision is searched, on every partition.
		absent := ulid.New(at)
		body := string(h.mustDo(http.StatusNotFound, "GET", "/v1/decisions/"+absent, nil, nil))
		if !strings.Contains(body, `"unknown_decision"`) || !strings.Contains(body, "every partition was searched") {
			t.Fatalf("404 of an id the log does not hold does not say the log was searched: %s", body)
		}
		// The search read the decision's record, at least.
		searchCounts(t, h, map[string]float64{"not_found": 1, "refused": 10}, 1, 1)
	})
}

// TestDecisionSearchBounds: a search stops at its per-partition record
// bound (503 decision_search_limited), and at its deadline.
func TestDecisionSearchBounds(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		h := newHarness(t, brokers, harnessOpt{apiOpts: []api.Option{api.WithDecisionSearch(api.DecisionSearch{PartitionRecords: 1})}})
		after := fleet(h)
		var r routeResp
		h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": "bounds-0", "token_ids": tokens(74, 0), "after": after}, &r)
		readDecisions(t, h, 1)
		at, err := ulid.Time(r.DecisionID)
		if err != nil {
			t.Fatal(err)
		}
		// The decision's partition offers it first: one record is enough
		// to find it, and too few to pass it for another id.
		rec, _, err := h.records(t).SearchDecision(context.Background(), r.DecisionID, at, logread.ScanLimits{Records: 1})
		if err != nil || rec.GetDecisionId() != r.DecisionID {
			t.Fatalf("SearchDecision(%s) within a record a partition: %v, %v", r.DecisionID, rec.GetDecisionId(), err)
		}
		code, hdr, body := h.do("GET", "/v1/decisions/"+ulid.New(at), nil, nil)
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"decision_search_limited"`) || hdr.Get("Retry-After") == "" {
			t.Fatalf("a search past its record bound: %d %s (Retry-After %q)", code, body, hdr.Get("Retry-After"))
		}
		searchCounts(t, h, map[string]float64{"limited": 1, "found": 0}, 1, 1)

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, _, err := h.records(t).SearchDecision(ctx, r.DecisionID, at, logread.ScanLimits{}); !errors.Is(err, api.ErrSearchLimit) {
			t.Fatalf("a search whose context ended: %v, want ErrSearchLimit", err)
		}
	})
}

// records is a reader of h's decisions topic of its own.
func (h *harness) records(t *testing.T) *api.LogDecisionReader {
	return api.NewLogDecisionReader(kafkatest.Client(t, h.brokers), h.names)
}

// heldReader holds every search until release is closed (or its request
// ends), and says when one has started.
type heldReader struct {
	*api.LogDecisionReader
	started chan struct{}
	release chan struct{}
}

func (r *heldReader) SearchDecision(ctx context.Context, id string, at time.Time, lim logread.ScanLimits) (*pb.DecisionRecord, int, error) {
	select {
	case r.started <- struct{}{}:
	default:
	}
	select {
	case <-r.release:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	return r.LogDecisionReader.SearchDecision(ctx, id, at, lim)
}

// TestDecisionSearchesAtOnce: with two searches running, a third is
// refused at once with 503 decision_search_busy and Retry-After; the two
// end as searches do, and the next one runs.
func TestDecisionSearchesAtOnce(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	held := &heldReader{started: make(chan struct{}, 3), release: make(chan struct{})}
	h := newHarness(t, brokers, harnessOpt{records: held, apiOpts: []api.Option{api.WithDecisionSearch(api.DecisionSearch{Concurrent: 2})}})
	held.LogDecisionReader = h.records(t)
	// Cleanups run last first: the held searches end before the server.
	release := sync.OnceFunc(func() { close(held.release) })
	t.Cleanup(release)
	id := ulid.New(time.Now())
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range codes {
		wg.Go(func() {
			resp, err := h.client.Get(h.srv.URL + "/v1/decisions/" + id)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	for range codes {
		select {
		case <-held.started:
		case <-time.After(20 * time.Second):
			t.Fatal("the searches did not start")
		}
	}
	// Refused at once, or held like the others until the deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", h.srv.URL+"/v1/decisions/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("a third search while two run was not answered at once: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"decision_search_busy"`) || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("a third search while two run: %d %s (Retry-After %q)", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	release()
	wg.Wait()
	if codes[0] != http.StatusNotFound || codes[1] != http.StatusNotFound {
		t.Fatalf("the held searches answered %v, want 404s", codes)
	}
	h.mustDo(http.StatusNotFound, "GET", "/v1/decisions/"+id, nil, nil)
	searchCounts(t, h, map[string]float64{"busy": 1, "not_found": 3, "error": 0}, 3, 0)
}

// TestSearchDecisionEveryPartition: the reader finds a decision on
// whichever partition holds it, passing over a record that holds its id
// but is another decision (one that retries it), and answers
// ErrRecordNotFound for an id no partition holds. Retention reads the
// topic's retention.ms.
func TestSearchDecisionEveryPartition(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		names := events.Names{Prefix: kafkatest.Prefix(t)}
		kafkatest.Migrate(t, brokers, names.Prefix)
		topic := names.Physical(events.TopicDecisions)
		want := eventstest.Decision(4, 2, 64)
		at := time.Unix(0, want.GetDecidedAtUnixNano())
		var recs []*kgo.Record
		for i, worker := range []string{"decode-1", "decode-2", "decode-3", "decode-4", "decode-5"} {
			d := proto.Clone(want).(*pb.DecisionRecord)
			d.DecisionId, d.RetryOfDecisionId = fmt.Sprintf("01JDX3Q8W6ZK2M4N5P6R7S8T%02d", i), want.GetDecisionId()
			d.DecodeWorker = &pb.WorkerRef{WorkerId: worker}
			r, err := events.NewRecord(names, events.WorkerKey(worker), d)
			if err != nil {
				t.Fatal(err)
			}
			r.Topic, r.Timestamp = topic, at
			recs = append(recs, r)
		}
		r, err := events.NewRecord(names, events.WorkerKey("decode-1"), want)
		if err != nil {
			t.Fatal(err)
		}
		r.Topic, r.Timestamp = topic, at
		recs = append(recs, r)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := kafkatest.Client(t, brokers).ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		parts := map[int32]bool{}
		for _, r := range recs {
			parts[r.Partition] = true
		}
		if len(parts) < 2 {
			t.Fatalf("the records went to %d partition: the test needs more", len(parts))
		}

		rd := api.NewLogDecisionReader(kafkatest.Client(t, brokers), names)
		got, scanned, err := rd.SearchDecision(ctx, want.GetDecisionId(), at, logread.ScanLimits{})
		if err != nil || !proto.Equal(got, want) {
			t.Fatalf("SearchDecision: %v, %v", got.GetDecisionId(), err)
		}
		if scanned < 2 {
			t.Fatalf("SearchDecision read %d records: it cannot have passed over the retry of the decision", scanned)
		}
		if _, _, err := rd.SearchDecision(ctx, "01JDX3Q8W6ZK2M4N5P6R7S8T9Z", at, logread.ScanLimits{}); !errors.Is(err, api.ErrRecordNotFound) {
			t.Fatalf("an id no partition holds: %v, want ErrRecordNotFound", err)
		}
		if keep, err := rd.Retention(ctx); err != nil || keep != 0 {
			t.Fatalf("Retention of a topic that keeps records forever: %s, %v; want 0", keep, err)
		}
		setTopicRetention(t, brokers, topic, 90*time.Minute)
		fresh := api.NewLogDecisionReader(kafkatest.Client(t, brokers), names)
		if keep, err := fresh.Retention(ctx); err != nil || keep != 90*time.Minute {
			t.Fatalf("Retention: %s, %v; want 1h30m", keep, err)
		}
	})
}

// setDecisionsRetention sets retention.ms of h's decisions topic.
func setDecisionsRetention(t *testing.T, h *harness, keep time.Duration) {
	t.Helper()
	setTopicRetention(t, h.brokers, h.names.Physical(events.TopicDecisions), keep)
}

func setTopicRetention(t *testing.T, brokers []string, topic string, keep time.Duration) {
	t.Helper()
	kafkatest.SetTopicConfig(t, brokers, topic, "retention.ms", strconv.FormatInt(keep.Milliseconds(), 10))
}

// searchCounts checks pdrouter_decision_log_searches_total of h for the
// results in want, and that pdrouter_decision_log_search_records observed
// searches searches that read at least minRecords records in all.
func searchCounts(t *testing.T, h *harness, want map[string]float64, searches uint64, minRecords float64) {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	var hist *dto.Histogram
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "pdrouter_decision_log_searches_total":
				got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			case "pdrouter_decision_log_search_records":
				hist = m.GetHistogram()
			}
		}
	}
	for result, n := range want {
		if v, ok := got[result]; !ok || v != n {
			t.Errorf("pdrouter_decision_log_searches_total{result=%q} = %v (registered %v), want %v", result, v, ok, n)
		}
	}
	if hist.GetSampleCount() != searches || hist.GetSampleSum() < minRecords {
		t.Errorf("pdrouter_decision_log_search_records: %d searches, %v records; want %d searches of at least %v records",
			hist.GetSampleCount(), hist.GetSampleSum(), searches, minRecords)
	}
}
