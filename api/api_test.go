package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/kvhash"
)

func tokens(n int, start uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = start + uint32(i)
	}
	return out
}

type routeResp struct {
	RequestID     string  `json:"request_id"`
	DecisionID    string  `json:"decision_id"`
	Mode          string  `json:"mode"`
	DecodeWorker  string  `json:"decode_worker"`
	PrefillWorker *string `json:"prefill_worker"`
	Reason        string  `json:"reason"`
	PromptTokens  int     `json:"prompt_tokens"`
	CachedTokens  int     `json:"cached_tokens"`
	EffectiveISL  int     `json:"effective_isl"`
	Idempotent    bool    `json:"idempotent_replay"`
	Candidates    []struct {
		Worker        string `json:"worker"`
		OverlapBlocks int    `json:"overlap_blocks"`
	} `json:"candidates"`
	Watermark map[string]map[string]int64 `json:"watermark"`
}

// fleet registers decode-1, decode-2 and prefill-1, and stores the first
// three 16-token blocks of tokens(…, 0) on decode-1. It returns the `after`
// vector that covers all of it.
func fleet(h *harness) map[string]map[string]int64 {
	var acks []offsets
	for _, w := range []map[string]any{
		{"worker_id": "decode-1", "pool": "decode", "model": "m", "block_size": 16, "total_kv_blocks": 1000, "engine": "vllm"},
		{"worker_id": "decode-2", "pool": "decode", "model": "m", "block_size": 16, "total_kv_blocks": 1000},
		{"worker_id": "prefill-1", "pool": "prefill", "model": "m", "block_size": 16, "max_num_batched_tokens": 8192},
	} {
		var o offsets
		h.mustDo(http.StatusAccepted, "POST", "/v1/workers", w, &o)
		acks = append(acks, o)
	}
	var o offsets
	h.mustDo(http.StatusAccepted, "POST", "/v1/events/kv", map[string]any{
		"worker_id": "decode-1", "ts": 1764400000.25,
		"events": []map[string]any{
			{"type": "stored", "block_hashes": []any{101, "102", "0x67"}, "parent_block_hash": nil, "token_ids": tokens(48, 0), "block_size": 16, "medium": "GPU"},
		},
	}, &o)
	return merge(append(acks, o)...)
}

// TestRouteEndToEnd: a request whose prefix is cached goes local on the
// worker that holds it, a long uncached one goes remote, each answered
// decision is in the decisions topic exactly as GET /v1/decisions returns
// it, and a repeated request_id returns the stored decision.
func TestRouteEndToEnd(t *testing.T) {
	kafkatest.Both(t, func(t *testing.T, brokers []string) {
		h := newHarness(t, brokers, harnessOpt{})
		after := fleet(h)

		var local routeResp
		h.mustDo(http.StatusOK, "POST", "/v1/route?explain=true", map[string]any{
			"request_id": "r-local", "model": "m", "token_ids": tokens(74, 0), "after": after}, &local)
		if local.Mode != "local" || local.DecodeWorker != "decode-1" || local.PrefillWorker != nil ||
			local.Reason != "bypass_allowed_decode_gate_disabled" || local.CachedTokens != 48 || local.EffectiveISL != 26 {
			t.Fatalf("cached prefix: %+v", local)
		}
		if len(local.Candidates) != 3 || local.Watermark["kv-events"] == nil {
			t.Fatalf("candidates %+v watermark %v", local.Candidates, local.Watermark)
		}

		var remote routeResp
		h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": "r-remote", "token_ids": tokens(4000, 50000)}, &remote)
		if remote.Mode != "remote" || remote.PrefillWorker == nil || *remote.PrefillWorker != "prefill-1" ||
			remote.Reason != "bypass_declined_by_policy" || remote.EffectiveISL != 4000 {
			t.Fatalf("long uncached prompt: %+v", remote)
		}
		if remote.Candidates != nil {
			t.Fatal("candidates returned without ?explain=true")
		}

		var again routeResp
		h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": "r-local", "token_ids": tokens(74, 0)}, &again)
		if again.DecisionID != local.DecisionID || !again.Idempotent {
			t.Fatalf("repeated request_id made a new decision: %s vs %s", again.DecisionID, local.DecisionID)
		}

		// The log holds exactly the two decisions, as the API reports them.
		got := readDecisions(t, h, 2)
		for _, want := range []routeResp{local, remote} {
			rec := got[want.DecisionID]
			if rec == nil {
				t.Fatalf("decision %s answered but not in the decisions topic", want.DecisionID)
			}
			if rec.GetRequestId() != want.RequestID || rec.GetMode() != want.Mode || events.WorkerRank(rec.GetDecodeWorker().GetWorkerId(), rec.GetDecodeWorker().GetDpRank()) != want.DecodeWorker {
				t.Fatalf("record %v differs from the answer %+v", rec, want)
			}
			// The digest names the prompt (kvhash.TokenDigest of the token ids).
			if prompt := map[string][]uint32{"r-local": tokens(74, 0), "r-remote": tokens(4000, 50000)}[want.RequestID]; rec.GetRequestDigest() != kvhash.TokenDigest(prompt) {
				t.Fatalf("record %s: request_digest %#x, want %#x", want.RequestID, rec.GetRequestDigest(), kvhash.TokenDigest(prompt))
			}
			if len(rec.GetCandidates()) != 3 || rec.GetConfigJson() == "" || rec.GetWatermark() == nil {
				t.Fatalf("record lacks what explain needs: %v", rec)
			}
			var byID map[string]any
			h.mustDo(http.StatusOK, "GET", "/v1/decisions/"+want.DecisionID, nil, &byID)
			if byID["decision_id"] != want.DecisionID {
				t.Fatalf("GET /v1/decisions/%s: %v", want.DecisionID, byID)
			}
		}
		var exp struct {
			PureCheck struct {
				Identical bool `json:"identical"`
			} `json:"pure_check"`
		}
		raw := h.mustDo(http.StatusOK, "GET", "/v1/decisions/"+local.DecisionID+"/explain", nil, &exp)
		if !exp.PureCheck.Identical {
			t.Fatalf("explain could not recompute the decision from its record: %s", raw)
		}
		h.mustDo(http.StatusBadRequest, "GET", "/v1/decisions/nope", nil, nil)
	})
}

// readDecisions reads the decisions topic until it holds n records (and a
// moment longer, to catch extras).
func readDecisions(t *testing.T, h *harness, n int) map[string]*pb.DecisionRecord {
	t.Helper()
	cl := kafkatest.Client(t, h.brokers, kgo.ConsumeTopics(h.names.Physical(events.TopicDecisions)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]*pb.DecisionRecord{}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		for _, r := range fs.Records() {
			env, err := events.Decode(h.names, r)
			if err != nil {
				t.Fatal(err)
			}
			d := env.Message.(*pb.DecisionRecord)
			if got[d.GetDecisionId()] != nil {
				t.Fatalf("decision %s is in the log twice", d.GetDecisionId())
			}
			got[d.GetDecisionId()] = d
		}
		if len(got) >= n && len(fs.Records()) == 0 {
			break
		}
	}
	if len(got) != n {
		t.Fatalf("decisions topic holds %d records, want %d", len(got), n)
	}
	return got
}

// TestLifecycleFreesActiveAccounting: a routed request adds active decode
// blocks on its worker; its completed event frees them on the state.
func TestLifecycleFreesActiveAccounting(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{})
	after := fleet(h)
	var r routeResp
	h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": "r1", "token_ids": tokens(160, 0), "after": after}, &r)
	active := func() int64 { return activeOn(t, h, r.DecodeWorker) }
	if a := active(); a != 10 {
		t.Fatalf("active decode blocks after routing 160 tokens = %d, want 10", a)
	}
	var o offsets
	h.mustDo(http.StatusAccepted, "POST", "/v1/requests/r1/events", map[string]any{"event": "completed", "output_tokens": 12, "itl_ms_mean": 20.5}, &o)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for active() != 0 {
		if ctx.Err() != nil {
			t.Fatalf("completed did not free the active blocks: %d", active())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBadInputGetsPreciseErrorsAndGoodInputStillWorks sends hostile and
// malformed requests between good ones: each gets the documented status,
// code and field, and the good ones keep being answered.
func TestBadInputGetsPreciseErrorsAndGoodInputStillWorks(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{apiOpts: nil})
	after := fleet(h)
	huge := `{"token_ids": [` + strings.Repeat("1,", 9<<20) + `1]}`
	cases := []struct {
		name, method, path, body string
		ctype                    string
		status                   int
		code, field              string
	}{
		{"garbage", "POST", "/v1/route", `{"token_ids": [1, 2`, "", 400, "malformed_json", ""},
		{"not json", "POST", "/v1/route", `<xml/>`, "", 400, "malformed_json", ""},
		{"empty", "POST", "/v1/route", ``, "", 400, "malformed_json", ""},
		{"two values", "POST", "/v1/route", `{"token_ids":[1]} {}`, "", 400, "malformed_json", ""},
		{"unknown field", "POST", "/v1/route", `{"token_ids":[1],"temperature":1}`, "", 400, "unknown_field", "temperature"},
		{"negative token", "POST", "/v1/route", `{"token_ids":[1,-2]}`, "", 400, "invalid_type", "token_ids"},
		{"token over u32", "POST", "/v1/route", `{"token_ids":[4294967296]}`, "", 400, "invalid_type", "token_ids"},
		{"wrong content type", "POST", "/v1/route", `{"token_ids":[1]}`, "text/plain", 415, "unsupported_media_type", ""},
		{"oversized body", "POST", "/v1/route", huge, "", 413, "body_too_large", ""},
		{"no prompt", "POST", "/v1/route", `{"model":"m"}`, "", 422, "missing_field", "token_ids"},
		{"both prompts", "POST", "/v1/route", `{"token_ids":[1],"block_hashes":[1],"block_size":16,"prompt_tokens":16}`, "", 422, "ambiguous_prompt", "block_hashes"},
		{"hashes without size", "POST", "/v1/route", `{"block_hashes":[1],"prompt_tokens":16}`, "", 422, "invalid_value", "block_size"},
		{"more hashes than tokens", "POST", "/v1/route", `{"block_hashes":[1,2],"block_size":16,"prompt_tokens":20}`, "", 422, "invalid_value", "block_hashes"},
		{"bad hash", "POST", "/v1/route", `{"block_hashes":["zz"],"block_size":16,"prompt_tokens":20}`, "", 400, "invalid_value", "block_hashes"},
		{"unknown model", "POST", "/v1/route", `{"model":"other","token_ids":[1]}`, "", 422, "unknown_model", "model"},
		{"bad after topic", "POST", "/v1/route", `{"token_ids":[1],"after":{"kv":{"0":1}}}`, "", 422, "invalid_value", "after.kv"},
		{"bad after partition", "POST", "/v1/route", `{"token_ids":[1],"after":{"load":{"x":1}}}`, "", 422, "invalid_value", "after.load.x"},
		{"long request id", "POST", "/v1/route", `{"request_id":"` + strings.Repeat("r", 300) + `","token_ids":[1]}`, "", 422, "invalid_request_id", "request_id"},
		{"unknown request", "POST", "/v1/requests/nope/events", `{"event":"completed"}`, "", 404, "unknown_request", ""},
		{"bad event", "POST", "/v1/requests/nope/events", `{"event":"finished"}`, "", 422, "invalid_value", "event"},
		{"bad pool", "POST", "/v1/workers", `{"worker_id":"w","pool":"both","model":"m","block_size":16}`, "", 422, "invalid_value", "pool"},
		{"worker id with slash", "POST", "/v1/workers", `{"worker_id":"a/b","pool":"decode","model":"m","block_size":16}`, "", 422, "invalid_value", "worker_id"},
		{"bad endpoint", "POST", "/v1/workers", `{"worker_id":"w","pool":"decode","model":"m","block_size":16,"kv_events_endpoint":"10.0.0.1:5557"}`, "", 422, "invalid_value", "kv_events_endpoint"},
		{"stored token mismatch", "POST", "/v1/events/kv", `{"worker_id":"w","events":[{"type":"stored","block_hashes":[1],"token_ids":[1,2],"block_size":16}]}`, "", 422, "invalid_value", "events[0].token_ids"},
		{"unknown kv type", "POST", "/v1/events/kv", `{"worker_id":"w","events":[{"type":"evicted"}]}`, "", 422, "invalid_value", "events[0].type"},
		{"no kv events", "POST", "/v1/events/kv", `{"worker_id":"w","events":[]}`, "", 422, "invalid_value", "events"},
		{"load ratio", "POST", "/v1/events/load", `{"worker_id":"w","kv_usage_ratio":1.5}`, "", 422, "invalid_value", "kv_usage_ratio"},
		{"bad ts", "POST", "/v1/events/load", `{"worker_id":"w","ts":-1}`, "", 422, "invalid_value", "ts"},
		{"deregister unknown", "DELETE", "/v1/workers/ghost", ``, "", 404, "unknown_worker", ""},
		{"no route", "GET", "/v2/route", ``, "", 404, "no_route", ""},
		{"wrong method", "PUT", "/v1/route", ``, "", 405, "method_not_allowed", ""},
	}
	good := 0
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, h.srv.URL+c.path, strings.NewReader(c.body))
			ct := c.ctype
			if ct == "" {
				ct = "application/json"
			}
			req.Header.Set("Content-Type", ct)
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var e struct {
				Error struct{ Code, Message, Field string } `json:"error"`
			}
			decodeJSON(t, resp, &e)
			if resp.StatusCode != c.status || e.Error.Code != c.code || e.Error.Field != c.field || e.Error.Message == "" {
				t.Fatalf("got %d %+v, want %d code=%s field=%s", resp.StatusCode, e.Error, c.status, c.code, c.field)
			}
		})
		// A good request after every bad one is still answered, and
		// completes, so the next one sees the same load.
		var r routeResp
		id := fmt.Sprintf("good-%d", i)
		h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": id, "token_ids": tokens(74, 0), "after": after}, &r)
		if r.DecodeWorker == "decode-1" && r.CachedTokens == 48 {
			good++
		}
		var o offsets
		h.mustDo(http.StatusAccepted, "POST", "/v1/requests/"+id+"/events", map[string]any{"event": "completed"}, &o)
		after = merge(offsets{Offsets: after}, o)
	}
	if good != len(cases) {
		t.Fatalf("only %d of %d good requests went to the worker holding their prefix", good, len(cases))
	}
}

// TestAuditLogDownAnswers503AndNoDecision: when the decisions topic cannot
// take the record (the broker is gone), /v1/route answers 503 with
// Retry-After and never a decision.
func TestAuditLogDownAnswers503AndNoDecision(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{apiOpts: nil})
	after := fleet(h)
	var r routeResp
	h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"token_ids": tokens(20, 0), "after": after}, &r)

	// A replica on the same topics whose log cannot write: its broker
	// address does not answer, so no produce ever succeeds.
	dead := newHarness(t, brokers, harnessOpt{share: h,
		log: func(h *harness) api.EventLog {
			cl := kafkatest.Client(t, []string{"127.0.0.1:1"}, append(api.GroupLogClientOpts(), kgo.RecordDeliveryTimeout(time.Second))...)
			return api.NewGroupLog(cl, h.names, 64<<20, nil)
		},
	})
	code, hdr, raw := dead.do("POST", "/v1/route", map[string]any{"request_id": "lost", "token_ids": tokens(20, 0), "after": after}, nil)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(string(raw), "audit_log_unavailable") {
		t.Fatalf("route with the audit log down: %d %v %s", code, hdr, raw)
	}
	if _, ok := dead.store.DecisionForRequest("lost"); ok {
		t.Fatal("a decision that was never durable was counted")
	}
	// Nothing of it reached the log: only the healthy replica's decision.
	readDecisions(t, h, 1)
}

// TestAfterBoundAnswers504 waits for offsets the log will never reach.
func TestAfterBoundAnswers504(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{apiOpts: []api.Option{api.WithAfterTimeout(300 * time.Millisecond)}})
	fleet(h)
	start := time.Now()
	code, _, raw := h.do("POST", "/v1/route", map[string]any{"token_ids": tokens(20, 0), "after": map[string]any{"kv-events": map[string]any{"0": 1 << 40}}}, nil)
	if code != http.StatusGatewayTimeout || !strings.Contains(string(raw), "after_timeout") {
		t.Fatalf("%d %s", code, raw)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("504 took %s", took)
	}
}

func TestBearerAuth(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{apiOpts: []api.Option{api.WithAuthToken("s3cret")}})
	code, hdr, _ := h.do("GET", "/v1/workers", nil, nil)
	if code != http.StatusUnauthorized || hdr.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: %d", code)
	}
	req, _ := http.NewRequest("GET", h.srv.URL+"/v1/workers", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := h.client.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("with token: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	req.Header.Set("Authorization", "Bearer s3cres")
	resp, _ = h.client.Do(req)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", resp.StatusCode)
	}
	resp.Body.Close()
	if code, _, _ := h.do("GET", "/healthz", nil, nil); code != http.StatusOK {
		t.Fatalf("healthz behind auth: %d", code)
	}
}

// TestOperationsEndpoints: health, readiness, state, metrics and the
// OpenAPI document answer, and the decision metrics carry their labels.
func TestOperationsEndpoints(t *testing.T) {
	brokers := kafkatest.Fake(t)
	h := newHarness(t, brokers, harnessOpt{})
	after := fleet(h)
	h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"token_ids": tokens(74, 0), "after": after}, nil)
	h.mustDo(http.StatusOK, "GET", "/healthz", nil, nil)
	h.mustDo(http.StatusOK, "GET", "/readyz", nil, nil)
	var st struct {
		Applied map[string]map[string]int64 `json:"applied"`
		Digest  string                      `json:"digest"`
	}
	h.mustDo(http.StatusOK, "GET", "/v1/state", nil, &st)
	if st.Digest == "" || len(st.Applied["workers"]) == 0 {
		t.Fatalf("state: %+v", st)
	}
	metrics := string(h.mustDo(http.StatusOK, "GET", "/metrics", nil, nil))
	for _, want := range []string{
		`pdrouter_decisions_total{mode="local",policy="isl_bounding",reason="bypass_allowed_decode_gate_disabled"} 1`,
		"pdrouter_decision_duration_seconds_bucket", "pdrouter_effective_isl_tokens_bucket",
		`pdrouter_http_requests_total{code="200",method="POST",route="/v1/route"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	h.mustDo(http.StatusOK, "GET", "/openapi.json", nil, nil)
}
