package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/internal/rejects"
)

// defaultRecordBudget is the default of --decision-record-max-bytes.
const defaultRecordBudget = 512 << 10

// registerDirect writes worker registrations straight to the workers topic
// in one produce (thousands of POST /v1/workers would only slow the test
// down) and returns the `after` vector that covers them.
func registerDirect(t *testing.T, h *harness, regs ...*pb.WorkerRegistration) map[string]map[string]int64 {
	t.Helper()
	cl := kafkatest.Client(t, h.brokers, kgo.ProducerBatchMaxBytes(4<<20))
	rs := make([]*kgo.Record, len(regs))
	for i, reg := range regs {
		r, err := events.NewRecord(h.names, events.WorkerKey(reg.GetWorkerId()), reg)
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	after := map[string]map[string]int64{"workers": {}}
	for _, res := range cl.ProduceSync(ctx, rs...) {
		if res.Err != nil {
			t.Fatalf("registering: %v", res.Err)
		}
		p := fmt.Sprint(res.Record.Partition)
		after["workers"][p] = max(after["workers"][p], res.Record.Offset)
	}
	return after
}

// repeating is n token ids of at most three digits, so a prompt of 2^21
// tokens stays within the default body limit as JSON.
func repeating(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i*7919) % 997
	}
	return out
}

// oversized is a request whose whole decision record would be over 1 MiB,
// the broker's default limit, with the fleet it is routed on.
type oversized struct {
	name    string
	workers func() []*pb.WorkerRegistration
	tokens  []uint32
	// candidates and chainBlocks are the table rows and the chain blocks
	// of the whole record (before any bound).
	candidates, chainBlocks int
}

func oversizedCases() []oversized {
	reg := func(id string, pool pb.Pool, bs uint32) *pb.WorkerRegistration {
		return &pb.WorkerRegistration{WorkerId: id, Pool: pool, Model: "m", BlockSize: bs, TotalKvBlocks: proto.Uint64(100000), MaxNumBatchedTokens: proto.Uint64(8192)}
	}
	return []oversized{
		{
			name: "17k decode candidates",
			workers: func() []*pb.WorkerRegistration {
				out := []*pb.WorkerRegistration{reg("prefill-0", pb.Pool_POOL_PREFILL, 16)}
				for i := range 17000 {
					out = append(out, reg(fmt.Sprintf("decode-%05d", i), pb.Pool_POOL_DECODE, 16))
				}
				return out
			},
			tokens: repeating(1000), candidates: 17001, chainBlocks: 62,
		},
		{
			name: "prompt of --max-prompt-tokens",
			workers: func() []*pb.WorkerRegistration {
				return []*pb.WorkerRegistration{reg("decode-1", pb.Pool_POOL_DECODE, 16), reg("prefill-1", pb.Pool_POOL_PREFILL, 16)}
			},
			tokens: repeating(1 << 21), candidates: 2, chainBlocks: 1 << 17,
		},
		{
			name: "150k tokens on block_size 1",
			workers: func() []*pb.WorkerRegistration {
				return []*pb.WorkerRegistration{reg("decode-1", pb.Pool_POOL_DECODE, 1), reg("prefill-1", pb.Pool_POOL_PREFILL, 16)}
			},
			tokens: repeating(150000), candidates: 2, chainBlocks: 150000 + 150000/16,
		},
	}
}

// TestOversizedDecisionsAreBoundedByDesign: requests whose whole decision
// record would be over the broker's limit (a huge fleet, the longest prompt
// allowed, a long prompt on block_size 1) are answered 200, with a record
// within the budget that is on the decisions topic, reads back through
// GET /v1/decisions/{id} from the topic, and explains with an identical
// pure check and a statement of what the record left out.
func TestOversizedDecisionsAreBoundedByDesign(t *testing.T) {
	for _, tc := range oversizedCases() {
		t.Run(tc.name, func(t *testing.T) { checkOversized(t, kafkatest.Fake(t), tc) })
	}
}

// TestOversizedDecisionOnTheRealBroker is the block_size 1 case on Apache
// Kafka with the topics' default configuration.
func TestOversizedDecisionOnTheRealBroker(t *testing.T) {
	checkOversized(t, kafkatest.Brokers(t), oversizedCases()[2])
}

func checkOversized(t *testing.T, brokers []string, tc oversized) {
	// Applying 17k registrations takes a minute or more under the race
	// detector on a loaded 2-core machine (77 s for one partition's share
	// in one CI run), so the wait for them is generous: the test is about
	// the record's bounds, not the apply rate. 17k workers are over the
	// default --max-workers.
	store := oneRecordInMemory
	store.MaxWorkers = 20000
	h := newHarness(t, brokers, harnessOpt{store: store, apiOpts: []api.Option{api.WithAfterTimeout(5 * time.Minute), api.WithMaxWorkers(20000)}})
	// The route waits up to the after timeout for the registrations to be
	// applied; the client must wait longer than that, or a loaded machine
	// (CI runs packages in parallel under the race detector) fails a
	// request the replica is still rightly holding.
	h.client.Timeout = 6 * time.Minute
	after := registerDirect(t, h, tc.workers()...)
	var r routeResp
	h.mustDo(http.StatusOK, "POST", "/v1/route?explain=true", map[string]any{"request_id": "big", "model": "m", "token_ids": tc.tokens, "after": after}, &r)
	// A small decision after it pushes it out of memory: its record is then
	// read from the topic.
	var small routeResp
	h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": "small", "model": "m", "token_ids": tokens(40, 0)}, &small)

	got := readDecisions(t, h, 2)
	rec := got[r.DecisionID]
	if rec == nil {
		t.Fatalf("decision %s answered but not on the decisions topic", r.DecisionID)
	}
	value, err := events.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(value) > defaultRecordBudget {
		t.Fatalf("record value is %d bytes, over the %d-byte budget", len(value), defaultRecordBudget)
	}
	if len(r.Candidates) != len(rec.GetCandidates()) {
		t.Fatalf("answer lists %d candidates, the record %d", len(r.Candidates), len(rec.GetCandidates()))
	}
	rows := len(rec.GetCandidates())
	omitted := int(rec.GetOmittedCandidates().GetDecode() + rec.GetOmittedCandidates().GetPrefill())
	if rows+omitted != tc.candidates || rows > 256 {
		t.Fatalf("record keeps %d rows and says %d were omitted; the table had %d (at most 256 kept)", rows, omitted, tc.candidates)
	}
	var picked int
	for _, c := range rec.GetCandidates() {
		if c.GetPicked() {
			picked++
		}
	}
	if picked != 2 {
		t.Fatalf("record keeps %d picked rows, want both pools' picks", picked)
	}
	blocks := 0
	for _, c := range rec.GetChains() {
		blocks += len(c.GetBlockHashes()) + int(c.GetOmittedBlocks())
	}
	kept := 0
	for _, c := range rec.GetChains() {
		kept += len(c.GetBlockHashes())
	}
	t.Logf("record of %d bytes: %d rows kept, %d omitted; %d of %d chain blocks kept", len(value), rows, omitted, kept, blocks)
	if blocks != tc.chainBlocks {
		t.Fatalf("chains hold and omit %d blocks in all, want the prompt's %d", blocks, tc.chainBlocks)
	}

	committedHeader(t, h, r.DecisionID)
	raw := h.mustDo(http.StatusOK, "GET", "/v1/decisions/"+r.DecisionID, nil, nil)
	if !strings.Contains(string(raw), r.DecisionID) {
		t.Fatalf("GET /v1/decisions: %.300s", raw)
	}
	var exp struct {
		PureCheck struct {
			Identical   bool            `json:"identical"`
			Differences json.RawMessage `json:"differences"`
		} `json:"pure_check"`
		Truncation *struct {
			CandidatesKept int `json:"candidates_kept"`
		} `json:"truncation"`
	}
	h.mustDo(http.StatusOK, "GET", "/v1/decisions/"+r.DecisionID+"/explain", nil, &exp)
	if !exp.PureCheck.Identical {
		t.Fatalf("pure check of the bounded record is not identical: %s", exp.PureCheck.Differences)
	}
	if exp.Truncation == nil || exp.Truncation.CandidatesKept != rows {
		t.Fatalf("explain does not say what the record left out: %+v", exp.Truncation)
	}
}

// TestDecisionOverTheBudgetIs413: a record that cannot be brought within
// --decision-record-max-bytes (here a budget smaller than the record's
// header) is refused with a 413 that is not retryable, counted, and never
// written.
func TestDecisionOverTheBudgetIs413(t *testing.T) {
	h := newHarness(t, kafkatest.Fake(t), harnessOpt{apiOpts: []api.Option{api.WithDecisionRecordMaxBytes(4096)}})
	after := fleet(h)
	var ok routeResp
	h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": "fits", "token_ids": tokens(40, 0), "after": after}, &ok)
	// Its chain is truncated to fit.
	h.mustDo(http.StatusOK, "POST", "/v1/route", map[string]any{"request_id": "long", "token_ids": tokens(100000, 0)}, &ok)

	big := strings.Repeat("x", 5000)
	code, hdr, raw := h.do("POST", "/v1/route", map[string]any{"request_id": "huge", "lora_name": big, "token_ids": tokens(40, 0)}, nil)
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(raw, &e)
	if code != http.StatusRequestEntityTooLarge || e.Error.Code != "decision_record_too_large" || hdr.Get("Retry-After") != "" {
		t.Fatalf("record over the budget: %d %v %s", code, hdr, raw)
	}
	if !strings.Contains(e.Error.Message, "4096") {
		t.Fatalf("the message does not name the budget: %s", e.Error.Message)
	}
	if _, ok := h.store.DecisionForRequest("huge"); ok {
		t.Fatal("a refused decision was counted")
	}
	readDecisions(t, h, 2)
	if n := rejects.For(h.reg).Value(rejects.HTTP, "decision_record_too_large"); n != 1 {
		t.Fatalf("pdrouter_rejected_total{entry=http,reason=decision_record_too_large} = %v, want 1", n)
	}
}
