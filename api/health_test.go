package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestWorkersShowHealth: a WorkerHealth record on the log makes GET
// /v1/workers show the worker unhealthy since the record's offset, and the
// next decision excludes it with the reason unhealthy (explain shows it);
// the recovered record brings it back.
func TestWorkersShowHealth(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{})
	fleet(h)
	cl := kafkatest.Client(t, brokers)
	put := func(m *pb.WorkerHealth) (int32, int64) {
		t.Helper()
		r, err := events.NewRecord(h.names, events.WorkerKey(m.GetWorkerId()), m)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res := cl.ProduceSync(ctx, r)
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		rec := res[0].Record
		return rec.Partition, rec.Offset
	}
	type healthRow struct {
		WorkerID string `json:"worker_id"`
		Health   struct {
			Healthy bool   `json:"healthy"`
			Reason  string `json:"reason"`
			Source  string `json:"source"`
			Detail  string `json:"detail"`
			Since   *struct {
				Topic     string `json:"topic"`
				Partition int32  `json:"partition"`
				Offset    int64  `json:"offset"`
			} `json:"since"`
		} `json:"health"`
	}
	health := func(id string, healthy bool) healthRow {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var ws struct {
				Workers []healthRow `json:"workers"`
			}
			h.mustDo(http.StatusOK, "GET", "/v1/workers", nil, &ws)
			for _, w := range ws.Workers {
				if w.WorkerID == id && w.Health.Healthy == healthy {
					return w
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never had healthy=%v: %+v", id, healthy, ws.Workers)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if w := health("decode-1", true); w.Health.Since != nil || w.Health.Reason != "" {
		t.Fatalf("decode-1 before any record: %+v", w.Health)
	}
	p, off := put(&pb.WorkerHealth{WorkerId: "decode-1", Reason: pb.HealthReason_HEALTH_REASON_SCRAPE_FAILED,
		Source: pb.HealthSource_HEALTH_SOURCE_INGEST_SCRAPE, ObservedAtUnixNano: time.Now().UnixNano(), Detail: "connection refused"})
	w := health("decode-1", false)
	if w.Health.Reason != "scrape_failed" || w.Health.Source != "ingest_scrape" || w.Health.Detail != "connection refused" ||
		w.Health.Since == nil || w.Health.Since.Topic != "load" || w.Health.Since.Partition != p || w.Health.Since.Offset != off {
		t.Fatalf("decode-1 unhealthy: %+v, want since load/%d@%d", w.Health, p, off)
	}
	// decode-1 holds the prefix, but is excluded.
	var r struct {
		DecisionID   string `json:"decision_id"`
		DecodeWorker string `json:"decode_worker"`
		Candidates   []struct {
			Worker   string `json:"worker"`
			Eligible bool   `json:"eligible"`
			Excluded string `json:"excluded"`
		} `json:"candidates"`
	}
	h.mustDo(http.StatusOK, "POST", "/v1/route?explain=true", map[string]any{"request_id": "r-1", "model": "m", "token_ids": tokens(74, 0)}, &r)
	if r.DecodeWorker != "decode-2" {
		t.Fatalf("routed to %s while decode-1 is unhealthy", r.DecodeWorker)
	}
	found := false
	for _, c := range r.Candidates {
		if c.Worker == "decode-1" {
			found = !c.Eligible && c.Excluded == "unhealthy"
		}
	}
	if !found {
		t.Fatalf("decode-1's row does not say excluded=unhealthy: %+v", r.Candidates)
	}
	// Explain recomputes the decision from its record, the exclusion included.
	var exp struct {
		PureCheck struct {
			Identical bool `json:"identical"`
		} `json:"pure_check"`
	}
	if raw := h.mustDo(http.StatusOK, "GET", "/v1/decisions/"+r.DecisionID+"/explain", nil, &exp); !exp.PureCheck.Identical {
		t.Fatalf("explain could not recompute a decision that excluded an unhealthy worker: %s", raw)
	}
	put(&pb.WorkerHealth{WorkerId: "decode-1", Healthy: true, Reason: pb.HealthReason_HEALTH_REASON_RECOVERED,
		Source: pb.HealthSource_HEALTH_SOURCE_INGEST_SCRAPE, ObservedAtUnixNano: time.Now().UnixNano()})
	health("decode-1", true)
	h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": "r-2", "model": "m", "token_ids": tokens(74, 0)}, &r)
	if r.DecodeWorker != "decode-1" {
		t.Fatalf("routed to %s after decode-1 recovered; want decode-1 (it holds the prefix)", r.DecodeWorker)
	}
}
