package api_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/internal/rejects"
	"github.com/pdrouter/pdrouter/statestore"
)

// workerIn returns a worker id with the prefix whose records fall in cell c.
func workerIn(prefix string, c events.Cell) string {
	for i := 0; ; i++ {
		id := prefix + strconv.Itoa(i)
		if c.OwnsWorker(id) {
			return id
		}
	}
}

// TestCellReplicaAnswersForItsCell, on the real broker: a replica of cell
// 1/2 takes its own workers' records and routes among them; a record of a
// worker in cell 0/2, which it would write where it never reads, and an
// `after` wait on cell 0/2's partitions are refused 421 wrong_cell, naming
// the cell that takes them, and counted.
func TestCellReplicaAnswersForItsCell(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	mine, theirs := events.Cell{Index: 1, Count: 2}, events.Cell{Index: 0, Count: 2}
	// A cap of one worker, which its own worker fills: another cell's
	// worker is misdirected, not one too many.
	h := newHarness(t, brokers, harnessOpt{store: statestore.Options{Cell: mine}, apiOpts: []api.Option{api.WithMaxWorkers(1)}})
	own, foreign := workerIn("decode-", mine), workerIn("decode-", theirs)
	reg := func(id string) string {
		return `{"worker_id":"` + id + `","pool":"decode","model":"m","block_size":16,"total_kv_blocks":1000}`
	}
	var o offsets
	h.mustDo(http.StatusAccepted, "POST", "/v1/workers", reg(own), &o)
	waitWorkers(t, h, 1)

	wrongCell := func(what string, code int, body []byte, field string) {
		t.Helper()
		want := []string{`"code":"wrong_cell"`, `"field":"` + field + `"`, "cell 0/2", "serves cell 1/2"}
		for _, w := range want {
			if code != http.StatusMisdirectedRequest || !strings.Contains(string(body), w) {
				t.Fatalf("%s: %d %s, want 421 saying %q", what, code, body, w)
			}
		}
	}
	code, _, body := h.do("POST", "/v1/workers", reg(foreign), nil)
	wrongCell("registering "+foreign, code, body, "worker_id")
	code, _, body = h.do("POST", "/v1/events/load", `{"worker_id":"`+foreign+`"}`, nil)
	wrongCell("a load sample of "+foreign, code, body, "worker_id")
	code, _, body = h.do("POST", "/v1/events/kv", `{"worker_id":"`+foreign+`","events":[{"type":"cleared"}]}`, nil)
	wrongCell("KV events of "+foreign, code, body, "worker_id")
	code, _, body = h.do("DELETE", "/v1/workers/"+foreign, nil, nil)
	wrongCell("deregistering "+foreign, code, body, "worker_id")
	code, _, body = h.do("POST", "/v1/route", map[string]any{"token_ids": tokens(64, 0),
		"after": map[string]map[string]int64{"decisions": {"3": 0, "2": 0, "4": 0}}}, nil)
	wrongCell("after on partition 2", code, body, "after.decisions.2")
	if n := rejects.For(h.reg).Value(rejects.HTTP, "wrong_cell"); n != 5 {
		t.Fatalf("rejected_total{http,wrong_cell} = %v, want 5", n)
	}

	// Its own worker routes, after its own partitions.
	var r routeResp
	h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"token_ids": tokens(64, 0), "after": o.Offsets}, &r)
	if r.DecodeWorker != own {
		t.Fatalf("routed to %q, want %s", r.DecodeWorker, own)
	}
	// Its record explains itself: the watermark names the cell's partitions.
	var exp struct {
		PureCheck struct {
			Identical bool `json:"identical"`
		} `json:"pure_check"`
	}
	if raw := h.mustDo(http.StatusOK, "GET", "/v1/decisions/"+r.DecisionID+"/explain", nil, &exp); !exp.PureCheck.Identical {
		t.Fatalf("explain of a cell's decision: %s", raw)
	}
	for _, d := range readDecisions(t, h, 1) {
		for _, tp := range d.GetWatermark().GetTopics() {
			for _, p := range tp.GetPartitions() {
				if p.GetPartition()%2 != 1 {
					t.Errorf("the decision's watermark names %s/%d, of cell 0/2", tp.GetTopic(), p.GetPartition())
				}
			}
		}
	}
	var st struct {
		Cell    string                      `json:"cell"`
		Applied map[string]map[string]int64 `json:"applied"`
		Lag     map[string]map[string]int64 `json:"lag"`
	}
	h.mustDo(http.StatusOK, "GET", "/v1/state", nil, &st)
	if st.Cell != "1/2" {
		t.Fatalf("GET /v1/state cell %q, want 1/2", st.Cell)
	}
	// Applied and lag name the cell's partitions only: lag of every
	// partition of the cell (16 of 32 for decisions), none of the other's.
	for what, vec := range map[string]map[string]map[string]int64{"applied": st.Applied, "lag": st.Lag} {
		if len(vec) == 0 {
			t.Fatalf("GET /v1/state: no %s", what)
		}
		for topic, ps := range vec {
			for p := range ps {
				if n, _ := strconv.Atoi(p); n%2 != 1 {
					t.Errorf("GET /v1/state: %s names %s/%s, of cell 0/2", what, topic, p)
				}
			}
		}
	}
	if n := len(st.Lag["decisions"]); n != 8 {
		t.Errorf("GET /v1/state: lag of %d decisions partitions, want the cell's 8 of 16", n)
	}
	// The cell is exported from the start.
	for name, want := range map[string]float64{"pdrouter_statestore_cell": 1, "pdrouter_statestore_cells": 2} {
		if got := gaugeValue(t, h.reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// gaugeValue reads an unlabelled gauge from reg.
func gaugeValue(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestCellAfterSkipsTopicsItDoesNotRead: a replica of a cell waits on its
// cell's partitions of the topics it applies and refuses another cell's
// (above), but skips a topic it never applies, in any partition, as a
// replica of the whole log does: the offsets of a forwarded lifecycle event
// (forwards, read by the forward reader, never applied) and of topics of
// another --load-deltas mode come back from other calls and are passed on.
func TestCellAfterSkipsTopicsItDoesNotRead(t *testing.T) {
	brokers := kafkatest.Fake(t)
	mine := events.Cell{Index: 1, Count: 2}
	h := newHarness(t, brokers, harnessOpt{store: statestore.Options{Cell: mine}, apiOpts: []api.Option{api.WithForwardEvents(true), api.WithReplicaID("router-a")}})
	var o offsets
	own := workerIn("decode-", mine)
	h.mustDo(http.StatusAccepted, "POST", "/v1/workers", `{"worker_id":"`+own+`","pool":"decode","model":"m","block_size":16,"total_kv_blocks":1000}`, &o)
	waitWorkers(t, h, 1)

	// A lifecycle event of a request this replica did not decide is
	// forwarded; find one whose forward lands in the other cell's
	// partitions.
	var fwd map[string]map[string]int64
	for i := 0; fwd == nil; i++ {
		if i == 64 {
			t.Fatal("64 forwards, none in a partition of cell 0/2")
		}
		var body struct {
			Forwarded bool                        `json:"forwarded"`
			Offsets   map[string]map[string]int64 `json:"offsets"`
		}
		h.mustDo(http.StatusAccepted, "POST", "/v1/requests/peer-"+strconv.Itoa(i)+"/events", map[string]any{"event": "completed"}, &body)
		for p := range body.Offsets[string(events.TopicForwards)] {
			if n, _ := strconv.Atoi(p); !mine.OwnsPartition(int32(n)) {
				fwd = body.Offsets
			}
		}
	}
	for what, after := range map[string]map[string]map[string]int64{
		"a forward's offsets":               fwd,
		"load-shares, which it never reads": {"load-shares": {"0": 7, "2": 1}},
	} {
		after["workers"] = o.Offsets["workers"]
		code, _, body := h.do("POST", "/v1/route", map[string]any{"token_ids": tokens(64, 0), "after": after}, nil)
		if code != http.StatusOK {
			t.Errorf("after %s in cell 0/2's partitions: %d %s, want 200", what, code, body)
		}
	}
}
