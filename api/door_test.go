package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/door"
	"github.com/pdrouter/pdrouter/door/doortest"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// doorHarness is a replica serving the OpenAI front door, with engines
// registered by http_url.
func doorHarness(t *testing.T, opts ...door.Option) *harness {
	return newHarness(t, kafkatest.Fake(t), harnessOpt{apiOpts: []api.Option{api.WithDoor(opts...)}})
}

// registerEngine registers e as a worker of model m in pool and waits
// until the replica's state shows it.
func (h *harness) registerEngine(id, pool string, e *doortest.Engine) {
	h.t.Helper()
	h.mustDo(http.StatusAccepted, "POST", "/v1/workers", `{"worker_id":"`+id+`","pool":"`+pool+`","model":"m","block_size":16,"total_kv_blocks":1000,"http_url":"`+e.URL()+`"}`, nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, out := h.do("GET", "/v1/workers", nil, nil)
		if strings.Contains(string(out), `"worker_id":"`+id+`"`) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("worker %s never appeared: %s", id, out)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// openai posts an OpenAI body to the door with a plain client (the door's
// answers are OpenAI's, not in /openapi.json).
func (h *harness) openai(path, body string) (*http.Response, []byte) {
	h.t.Helper()
	resp, err := http.Post(h.srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// outcomes reads the outcomes topic.
func (h *harness) outcomes() []*pb.OutcomeEvent {
	h.t.Helper()
	var out []*pb.OutcomeEvent
	for _, r := range kafkatest.ReadAll(h.t, h.brokers, h.names.Physical(events.TopicOutcomes)) {
		env, err := events.Decode(h.names, r)
		if err != nil {
			h.t.Fatal(err)
		}
		out = append(out, env.Message.(*pb.OutcomeEvent))
	}
	return out
}

// TestDoorOutcomeJoinsDecision: a chat request through the door is
// tokenized by the decode engine, decided by the replica (the decision
// durable and readable at GET /v1/decisions/{id}), forwarded, and its
// outcome lands on the outcomes topic with the decision's id, request id
// and workers, TTFT, ITL and output tokens.
func TestDoorOutcomeJoinsDecision(t *testing.T) {
	h := doorHarness(t)
	eng := doortest.New(t, "d1")
	eng.Tokens, eng.Gap = 6, 5*time.Millisecond
	h.registerEngine("d1", "decode", eng)
	resp, body := h.openai("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":6,"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	id := resp.Header.Get(door.HeaderDecisionID)
	var rec map[string]any
	h.mustDo(http.StatusOK, "GET", "/v1/decisions/"+id, nil, &rec)
	if rec["request_id"] != resp.Header.Get(door.HeaderRequestID) || rec["mode"] != "local" || rec["expected_output_tokens"] != 6.0 || eng.Tokenizes() != 1 ||
		resp.Header.Get(door.HeaderMode) != rec["mode"] || resp.Header.Get(door.HeaderReason) != rec["reason"] || rec["reason"] == "" {
		t.Fatalf("decision %v", rec)
	}
	if got := eng.Headers()[0].Get("X-Request-Id"); got != rec["request_id"] {
		t.Fatalf("the engine got request id %q", got)
	}
	var o *pb.OutcomeEvent
	deadline := time.Now().Add(10 * time.Second)
	for o == nil && time.Now().Before(deadline) {
		for _, ev := range h.outcomes() {
			o = ev
		}
	}
	if o == nil || o.GetDecisionId() != id || o.GetRequestId() != rec["request_id"] || o.GetKind() != pb.OutcomeEvent_KIND_COMPLETED ||
		o.GetDecodeWorker().GetWorkerId() != "d1" || o.GetOutputTokens() != 6 || o.TtftMs == nil || o.ItlMsMean == nil {
		t.Fatalf("outcome %v", o)
	}
}

// TestDoorRetryLinksDecisions: the decode worker picked first (a, which
// holds the prompt's first block) answers 500; the door retries once with
// a new decision whose record links the failed one
// (retry_of_decision_id, also in explain) and has a excluded
// "unavailable", and the client gets b's answer.
func TestDoorRetryLinksDecisions(t *testing.T) {
	h := doorHarness(t)
	a, b := doortest.New(t, "a"), doortest.New(t, "b")
	a.Status = 500
	h.registerEngine("a", "decode", a)
	h.registerEngine("b", "decode", b)
	prompt := make([]int, 17)
	for i := range prompt {
		prompt[i] = i + 1
	}
	h.mustDo(http.StatusAccepted, "POST", "/v1/events/kv", map[string]any{"worker_id": "a",
		"events": []map[string]any{{"type": "stored", "block_hashes": []any{7}, "token_ids": prompt[:16], "block_size": 16}}}, nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, out := h.do("GET", "/v1/workers", nil, nil)
		if strings.Contains(string(out), `"cached_blocks":1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's block never applied: %s", out)
		}
		time.Sleep(5 * time.Millisecond)
	}
	ids, _ := json.Marshal(prompt)
	resp, body := h.openai("/v1/completions", `{"model":"m","prompt":`+string(ids)+`,"max_tokens":4}`)
	if resp.StatusCode != 200 || len(a.Requests()) != 1 || len(b.Requests()) != 1 {
		t.Fatalf("%d %s; a got %d, b %d", resp.StatusCode, body, len(a.Requests()), len(b.Requests()))
	}
	var retry map[string]any
	h.mustDo(http.StatusOK, "GET", "/v1/decisions/"+resp.Header.Get(door.HeaderDecisionID), nil, &retry)
	failedID, _ := retry["retry_of_decision_id"].(string)
	var failed map[string]any
	h.mustDo(http.StatusOK, "GET", "/v1/decisions/"+failedID, nil, &failed)
	if failed["decode_worker"].(map[string]any)["worker_id"] != "a" || retry["decode_worker"].(map[string]any)["worker_id"] != "b" {
		t.Fatalf("failed %v\nretry %v", failed, retry)
	}
	excluded := false
	for _, c := range retry["candidates"].([]any) {
		row := c.(map[string]any)
		excluded = excluded || (row["worker"].(map[string]any)["worker_id"] == "a" && row["excluded"] == "unavailable")
	}
	if !excluded {
		t.Fatalf("a is not excluded in the retry's table: %v", retry["candidates"])
	}
	var exp map[string]any
	h.mustDo(http.StatusOK, "GET", "/v1/decisions/"+resp.Header.Get(door.HeaderDecisionID)+"/explain", nil, &exp)
	if exp["retry_of_decision_id"] != failedID {
		t.Fatalf("explain: %v", exp["retry_of_decision_id"])
	}
	if pc, _ := exp["pure_check"].(map[string]any); pc["identical"] != true || pc["record_bytes_identical"] != true {
		t.Fatalf("the retry's decision does not recompute from its record: %v", exp["pure_check"])
	}
	kinds := map[string]pb.OutcomeEvent_Kind{}
	// The last outcome is appended after the client has its answer.
	for deadline := time.Now().Add(10 * time.Second); len(kinds) < 2 && time.Now().Before(deadline); {
		for _, o := range h.outcomes() {
			kinds[o.GetDecisionId()] = o.GetKind()
		}
	}
	if kinds[failedID] != pb.OutcomeEvent_KIND_CANCELLED || kinds[retry["decision_id"].(string)] != pb.OutcomeEvent_KIND_COMPLETED {
		t.Fatalf("outcomes by decision %v", kinds)
	}
}

// TestDoorUnknownModel: a model no worker serves is OpenAI's 404
// model_not_found, in OpenAI's error shape.
func TestDoorUnknownModel(t *testing.T) {
	h := doorHarness(t)
	h.registerEngine("d1", "decode", doortest.New(t, "d1"))
	resp, body := h.openai("/v1/completions", `{"model":"nope","prompt":[1,2]}`)
	if resp.StatusCode != 404 || !strings.Contains(string(body), `"code":"model_not_found"`) || !strings.Contains(string(body), `"type":"invalid_request_error"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// TestDoorFleetFollowsRegistrations: the door's model list and tokenizer
// lookups (indexed per version of the worker list) follow registrations:
// a new model is listed and tokenized on its worker once registered.
func TestDoorFleetFollowsRegistrations(t *testing.T) {
	h := doorHarness(t)
	e1, e2 := doortest.New(t, "d1"), doortest.New(t, "d2")
	h.registerEngine("d1", "decode", e1)
	if _, body := h.openai("/v1/completions", `{"model":"m","prompt":"hi","max_tokens":2}`); e1.Tokenizes() != 1 {
		t.Fatalf("m not tokenized on d1: %s", body)
	}
	h.mustDo(http.StatusAccepted, "POST", "/v1/workers", `{"worker_id":"d2","pool":"decode","model":"m2","block_size":16,"total_kv_blocks":1000,"http_url":"`+e2.URL()+`"}`, nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(h.srv.URL + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), `"id":"m2"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("m2 never listed: %s", body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.openai("/v1/completions", `{"model":"m2","prompt":"hi","max_tokens":2}`)
	if e2.Tokenizes() != 1 {
		t.Fatal("m2 not tokenized on its worker")
	}
}
