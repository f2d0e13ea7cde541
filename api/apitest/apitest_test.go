package apitest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/api/apitest"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestReplicaRegistersAndLists checks the replica end to end: a
// registration is validated by the endpoint, written to the log, applied
// by the materializer and listed; an invalid one is refused.
func TestReplicaRegistersAndLists(t *testing.T) {
	r := apitest.Start(t, kafkatest.Fake(t))
	post := func(body string) int {
		resp, err := http.Post(r.URL+"/v1/workers", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(`{"worker_id":"d1","pool":"decode","model":"m","block_size":16}`); code != http.StatusAccepted {
		t.Fatalf("registration: %d, want 202", code)
	}
	if code := post(`{"worker_id":"d2","pool":"both","model":"m","block_size":16}`); code != http.StatusUnprocessableEntity {
		t.Fatalf("bad pool: %d, want 422", code)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(r.URL + "/v1/workers")
		if err != nil {
			t.Fatal(err)
		}
		var ans struct{ Workers []api.WorkerStatus }
		err = json.NewDecoder(resp.Body).Decode(&ans)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(ans.Workers) == 1 && ans.Workers[0].WorkerID == "d1" && ans.Workers[0].BlockSize == 16 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers: %+v, want d1 alone", ans.Workers)
		}
	}
}
