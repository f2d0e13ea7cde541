package door

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/door/doortest"
)

type fakeHealth struct {
	mu      sync.Mutex
	workers []string
	details []string
}

func (f *fakeHealth) Unreachable(_ context.Context, worker, detail string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workers, f.details = append(f.workers, worker), append(f.details, detail)
	return nil
}

func (f *fakeHealth) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.workers...)
}

// refusingURL is a loopback address nothing listens on.
func refusingURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "http://" + addr
}

// TestUnreachableWorkerReported: a worker whose port refuses is reported
// (once, however many requests meet it within reportEvery), the request is
// retried and answered; a worker that answers 500 is retried but not
// reported, since it was reached.
func TestUnreachableWorkerReported(t *testing.T) {
	good, bad := doortest.New(t, "good"), doortest.New(t, "bad")
	bad.Status = 500
	dead := Decision{Decode: Worker{ID: "dead", HTTPURL: refusingURL(t)}}
	ok := Decision{Decode: Worker{ID: good.ID, HTTPURL: good.URL()}}
	r := newRig(t, []Decision{dead, ok, dead, ok, local(bad), ok}, []string{good.URL()})
	fh := &fakeHealth{}
	r.door.deps.Health = fh
	for i := range 3 {
		resp, body := r.post("/v1/completions", `{"model":"m","prompt":[1,2],"stream":false}`)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(fh.got()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a second report would be under way by now
	if got := fh.got(); len(got) != 1 || got[0] != "dead" {
		t.Fatalf("reports %v, want [dead] once", got)
	}
	if fh.details[0] == "" {
		t.Fatal("the report has no detail")
	}
	if n := metric(t, r.door.metrics.healthReports.WithLabelValues(resultOK)); n != 1 {
		t.Fatalf("pdrouter_door_worker_health_reports_total{result=ok} = %v, want 1", n)
	}
	if n := metric(t, r.door.metrics.retries.WithLabelValues("upstream_unreachable")); n != 2 {
		t.Fatalf("retries{upstream_unreachable} = %v, want 2", n)
	}
}

func TestHealthReportsDue(t *testing.T) {
	var h healthReports
	t0 := time.Unix(1000, 0)
	if !h.due("a", t0) || h.due("a", t0.Add(reportEvery/2)) || !h.due("b", t0) {
		t.Fatal("a worker is reported at most once per reportEvery, others independently")
	}
	if !h.due("a", t0.Add(reportEvery)) {
		t.Fatal("a worker is reported again after reportEvery")
	}
	if !h.due("c", t0.Add(3*reportEvery)) || len(h.last) != 1 {
		t.Fatalf("stale entries kept: %v", h.last)
	}
}
